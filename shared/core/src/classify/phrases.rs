//! The wording rules' phrases, found in one pass over a reply: one Aho-Corasick automaton over
//! every phrase and its accent-folded form ([`fold`]), built on first use.

use super::rules::text_rules;
use super::smtp::{fold, folded_word};
use aho_corasick::{AhoCorasick, MatchKind};
use std::collections::HashMap;
use std::sync::LazyLock;

/// The automaton and, for each rule in the order of [`text_rules`], its phrase lists as phrase
/// numbers.
struct Phrases {
    /// `None` if the automaton could not be built (it cannot, for these few thousand short
    /// patterns): then each pattern is looked for on its own, as slowly as before it.
    automaton: Option<AhoCorasick>,
    patterns: Vec<String>,
    /// The phrase numbers each pattern of the automaton stands for (a phrase listed twice, or a
    /// folded form equal to another phrase, is one pattern).
    numbers: Vec<Vec<usize>>,
    rules: Vec<Vec<Vec<usize>>>,
    count: usize,
}

static PHRASES: LazyLock<Phrases> = LazyLock::new(|| {
    let mut patterns: Vec<String> = Vec::new();
    let mut numbers: Vec<Vec<usize>> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut count = 0;
    let mut add = |pattern: String, number: usize| {
        let at = *index.entry(pattern.clone()).or_insert_with(|| {
            patterns.push(pattern);
            numbers.push(Vec::new());
            patterns.len() - 1
        });
        numbers[at].push(number);
    };
    let rules = text_rules()
        .map(|rule| {
            rule.any_of
                .iter()
                .map(|all| {
                    all.iter()
                        .map(|phrase| {
                            let number = count;
                            count += 1;
                            add((*phrase).to_owned(), number);
                            if let Some(folded) = folded_word(phrase) {
                                add(folded, number);
                            }
                            number
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let automaton = AhoCorasick::builder()
        .match_kind(MatchKind::Standard)
        .build(&patterns)
        .ok();
    Phrases {
        automaton,
        patterns,
        numbers,
        rules,
        count,
    }
});

/// The phrases a reply's rule text holds, with or without their accents.
pub(super) struct Found(Vec<u64>);

impl Found {
    /// Every phrase found in `lower` or in its folded form.
    pub(super) fn in_text(lower: &str) -> Found {
        let phrases = &*PHRASES;
        let mut found = vec![0u64; phrases.count.div_ceil(64)];
        let mut mark = |text: &str| {
            let hits: Vec<usize> = match &phrases.automaton {
                Some(automaton) => automaton
                    .find_overlapping_iter(text)
                    .map(|hit| hit.pattern().as_usize())
                    .collect(),
                None => (0..phrases.patterns.len())
                    .filter(|&p| text.contains(&phrases.patterns[p]))
                    .collect(),
            };
            for p in hits {
                for &n in &phrases.numbers[p] {
                    found[n / 64] |= 1 << (n % 64);
                }
            }
        };
        mark(lower);
        let folded = fold(lower);
        if folded != lower {
            mark(&folded);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::smtp::{SmtpReply, rule_text};

    /// The automaton finds, for every rule and every reply of the fixture corpus (and the same
    /// replies without their accents or with accents put in), what looking for each phrase and
    /// its folded form on its own finds.
    #[test]
    fn the_automaton_finds_what_a_scan_of_each_phrase_finds() {
        let corpus = include_str!("../../tests/fixtures/smtp_replies.jsonl");
        let mut texts: Vec<String> = corpus
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["reply"].as_str().map(str::to_owned))
            .collect();
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
        for raw in &texts {
            let reply = SmtpReply::parse(raw);
            let lower = rule_text(reply.enhanced, &reply.text);
            let folded = fold(&lower);
            let found = Found::in_text(&lower);
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
