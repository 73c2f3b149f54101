//! Phrases found in one pass over a reply: an Aho-Corasick automaton over every phrase and its
//! accent-folded form ([`fold`]), built on first use, for the wording rules and the signal words.

use super::rules::text_rules;
use super::smtp::{fold, folded_word};
use aho_corasick::{AhoCorasick, MatchKind};
use std::collections::HashMap;
use std::sync::LazyLock;

/// Numbered phrases, each also in its accent-folded form, in one automaton.
pub(super) struct Patterns {
    /// `None` if the automaton could not be built (it cannot, for these few thousand short
    /// patterns): then each pattern is looked for on its own, as slowly as before it.
    automaton: Option<AhoCorasick>,
    patterns: Vec<String>,
    /// The phrase numbers each pattern stands for (a phrase listed twice, or a folded form equal
    /// to another phrase, is one pattern).
    numbers: Vec<Vec<usize>>,
    count: usize,
}

impl Patterns {
    /// The phrases, numbered in order from 0.
    pub(super) fn new<'p>(phrases: impl IntoIterator<Item = &'p str>) -> Patterns {
        let mut patterns: Vec<String> = Vec::new();
        let mut numbers: Vec<Vec<usize>> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut add = |pattern: String, number: usize| {
            let at = *index.entry(pattern.clone()).or_insert_with(|| {
                patterns.push(pattern);
                numbers.push(Vec::new());
                patterns.len() - 1
            });
            numbers[at].push(number);
        };
        let mut count = 0;
        for phrase in phrases {
            add(phrase.to_owned(), count);
            if let Some(folded) = folded_word(phrase) {
                add(folded, count);
            }
            count += 1;
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::Standard)
            .build(&patterns)
            .ok();
        Patterns {
            automaton,
            patterns,
            numbers,
            count,
        }
    }

    /// Calls `hit(number, text, start)` for every occurrence of a phrase (or its folded form) in
    /// `lower`, and in `lower`'s folded form when folding changes it.
    pub(super) fn each_hit(&self, lower: &str, mut hit: impl FnMut(usize, &str, usize)) {
        let mut scan = |text: &str| match &self.automaton {
            Some(automaton) => {
                for found in automaton.find_overlapping_iter(text) {
                    for &n in &self.numbers[found.pattern().as_usize()] {
                        hit(n, text, found.start());
                    }
                }
            }
            None => {
                for (p, pattern) in self.patterns.iter().enumerate() {
                    for start in overlapping(text, pattern) {
                        for &n in &self.numbers[p] {
                            hit(n, text, start);
                        }
                    }
                }
            }
        };
        scan(lower);
        let folded = fold(lower);
        if folded != lower {
            scan(&folded);
        }
    }
}

/// Where `pattern` starts in `text`, occurrences that overlap included ("aa" twice in "aaa").
fn overlapping<'t>(text: &'t str, pattern: &'t str) -> impl Iterator<Item = usize> + 't {
    let mut from = 0;
    std::iter::from_fn(move || {
        let at = from + text.get(from..)?.find(pattern)?;
        from = at + text[at..].chars().next().map_or(1, char::len_utf8);
        Some(at)
    })
}

#[cfg(test)]
impl Patterns {
    /// The same patterns, looked for one by one.
    fn without_automaton(mut self) -> Patterns {
        self.automaton = None;
        self
    }
}

/// Every phrase of the rules, and for each rule in the order of [`text_rules`] its phrase lists
/// as phrase numbers.
struct Phrases {
    patterns: Patterns,
    rules: Vec<Vec<Vec<usize>>>,
}

static PHRASES: LazyLock<Phrases> = LazyLock::new(|| {
    let mut phrases: Vec<&'static str> = Vec::new();
    let rules = text_rules()
        .map(|rule| {
            rule.any_of
                .iter()
                .map(|all| {
                    all.iter()
                        .map(|&phrase| {
                            phrases.push(phrase);
                            phrases.len() - 1
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    Phrases {
        patterns: Patterns::new(phrases),
        rules,
    }
});

/// The phrases a reply's rule text holds, with or without their accents.
pub(super) struct Found(Vec<u64>);

impl Found {
    /// Every phrase found in `lower` or in its folded form.
    pub(super) fn in_text(lower: &str) -> Found {
        let patterns = &PHRASES.patterns;
        let mut found = vec![0u64; patterns.count.div_ceil(64)];
        patterns.each_hit(lower, |n, _, _| found[n / 64] |= 1 << (n % 64));
        Found(found)
    }

    fn has(&self, n: usize) -> bool {
        self.0[n / 64] & (1 << (n % 64)) != 0
    }

    /// Whether all phrases of one of the lists of the rule at `position` in [`text_rules`] were
    /// found.
    pub(super) fn rule_phrases(&self, position: usize) -> bool {
        PHRASES.rules[position]
            .iter()
            .any(|all| all.iter().all(|&n| self.has(n)))
    }
}

/// The replies of the classifier's fixture corpus, for the matchers' tests.
#[cfg(test)]
pub(super) fn fixture_replies() -> Vec<String> {
    include_str!("../../tests/fixtures/smtp_replies.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["reply"].as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::smtp::{SmtpReply, rule_text};

    /// The search without the automaton finds overlapping occurrences, as the automaton does.
    #[test]
    fn the_search_without_the_automaton_finds_overlapping_occurrences() {
        assert_eq!(overlapping("aaa", "aa").collect::<Vec<_>>(), [0, 1]);
        assert_eq!(overlapping("ééé", "éé").collect::<Vec<_>>(), [0, 2]);
        assert_eq!(overlapping("abc", "d").count(), 0);
        let patterns = Patterns::new(["no such user", "user unknown"]);
        for p in [
            &patterns,
            &Patterns::new(["no such user", "user unknown"]).without_automaton(),
        ] {
            let mut hits = Vec::new();
            p.each_hit("no such user unknown", |n, _, start| hits.push((n, start)));
            hits.sort_unstable();
            assert_eq!(hits, [(0, 0), (1, 8)]);
        }
    }

    /// The automaton finds, for every rule and every reply of the fixture corpus (and some
    /// replies with and without their accents), what looking for each phrase and its folded
    /// form on its own finds; and the same occurrences as the search without it.
    #[test]
    fn the_automaton_finds_what_a_scan_of_each_phrase_finds() {
        let mut texts = fixture_replies();
        texts.extend(
            [
                "553 usuario desconhecido",
                "552 Boîte aux lettres pleine",
                "срок доставки истек",
                "Destinatário não encontrado, usuário inexistente",
            ]
            .map(str::to_owned),
        );
        assert!(texts.len() > 300);
        let phrases =
            text_rules().flat_map(|r| r.any_of.iter().flat_map(|all| all.iter().copied()));
        let slow = Patterns::new(phrases).without_automaton();
        for raw in &texts {
            let reply = SmtpReply::parse(raw);
            let lower = rule_text(reply.enhanced, &reply.text);
            let folded = fold(&lower);
            let found = Found::in_text(&lower);
            let hits = |patterns: &Patterns| {
                let mut hits = Vec::new();
                patterns.each_hit(&lower, |n, text, start| hits.push((n, text.len(), start)));
                hits.sort_unstable();
                hits
            };
            assert_eq!(hits(&PHRASES.patterns), hits(&slow), "{raw}");
            for (position, rule) in text_rules().enumerate() {
                let scanned = rule.any_of.iter().any(|all| {
                    all.iter()
                        .all(|p| lower.contains(p) || folded.contains(fold(p).as_ref()))
                });
                assert_eq!(
                    found.rule_phrases(position),
                    scanned,
                    "{} in {raw}",
                    rule.name
                );
            }
        }
    }
}
