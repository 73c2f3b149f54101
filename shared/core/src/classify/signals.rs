//! Words that decide a reply's fate beside the rules: a failure called permanent or temporary,
//! and a codeless refusal. Each list holds English and the languages receivers answer in
//! (translations of the English words, not any one provider's wording).

use super::phrases::Patterns;
use super::smtp::{ends_with_word, is_a_name, is_word};
use std::sync::LazyLock;

/// Words that call a failure final, in bounces that carry no code.
const PERMANENT_WORDS: &[&str] = &[
    "permanent failure",
    "permanent error",
    "failed permanently",
    "permanently failed",
    "unrecoverable error",
    "no further delivery attempts",
    "no more delivery attempts",
    // "permanent error" in German, French, Spanish, Portuguese, Italian, Dutch, Polish, Russian,
    // Japanese, Chinese, Korean
    "dauerhafter fehler",
    "permanenter fehler",
    "erreur permanente",
    "échec permanent",
    "error permanente",
    "error irrecuperable",
    "no se realizarán más intentos",
    "no se realizarán mas intentos",
    "fallo permanente",
    "erro permanente",
    "falha permanente",
    "errore permanente",
    "permanente fout",
    "błąd trwały",
    "trwały błąd",
    "постоянная ошибка",
    "恒久的なエラー",
    "永続的なエラー",
    "永久性错误",
    "永久错误",
    "영구적인 오류",
    // The fixed openings of failure (not delay) notices: Exim's, Exchange's, Gmail's.
    "mail delivery failed: returning message to sender",
    "delivery has failed to these recipients",
    "delivery status notification (failure)",
];

/// Words that call a refusal temporary, whatever its code (each the start of a word):
/// "temporary" / "temporarily" and "try again later".
const TEMPORARY_WORDS: &[&str] = &[
    "temporar",
    // sendmail's and milters' EX_TEMPFAIL ("TempFail", "tempfail"): AOL's `521 5.2.1 "TempFail"`
    "tempfail",
    "try again later",
    "retry later",
    "try later",
    "will retry",
    // delay notices (RFC 3464 `Action: delayed`): "Delivery will continue to be attempted"
    "continue to be attempted",
    "will continue to try",
    "not been delivered yet",
    "not yet been delivered",
    "n't been delivered yet",
    // German
    "vorübergehend",
    "temporär",
    "später erneut",
    "später noch einmal",
    "später wieder",
    "versuchen sie es später",
    // French
    "temporaire",
    "plus tard",
    // Spanish
    "temporal",
    "más tarde",
    "mas tarde",
    // Portuguese
    "temporári",
    "mais tarde",
    // Italian
    "temporane",
    "più tardi",
    "piu tardi",
    // Dutch
    "tijdelijk",
    "later opnieuw",
    "later nog eens",
    // Polish
    "tymczasow",
    "później",
    // Czech and Slovak
    "dočasn",
    "později",
    "neskôr",
    // Swedish, Danish and Norwegian, Finnish
    "tillfällig",
    "igen senare",
    "midlertidig",
    "igen senere",
    "igjen senere",
    "tilapäi",
    "myöhemmin",
    // Hungarian, Romanian ("temporar" above), Turkish, Greek
    "ideiglenes",
    "később",
    "mai târziu",
    "mai tarziu",
    "geçici",
    "daha sonra tekrar",
    "προσωριν",
    "αργότερα",
    // Russian and Bulgarian, Ukrainian
    "временн",
    "позже",
    "позднее",
    "по-късно",
    "тимчасов",
    "пізніше",
    // Korean, Vietnamese, Indonesian and Malay, Arabic, Hebrew
    "일시적",
    "잠시 후",
    "나중에 다시",
    "tạm thời",
    "thử lại sau",
    "coba lagi nanti",
    "cuba lagi nanti",
    "مؤقت",
    "لاحقا",
    "זמני",
    "מאוחר יותר",
];

/// [`TEMPORARY_WORDS`] in scripts without spaces between words, read anywhere in the text:
/// Japanese, simplified and traditional Chinese, Thai.
const TEMPORARY_CJK: &[&str] = &[
    "一時的",
    "しばらくしてから",
    "後ほど",
    "時間をおいて",
    "時間を置いて",
    "暂时",
    "暫時",
    "临时",
    "臨時",
    "稍后",
    "稍後",
    "ชั่วคราว",
];

/// Words that deny the temporary reading: the failure is called permanent or "not temporary", or
/// "temporary" names a throwaway address that the receiver refuses.
const NOT_TEMPORARY: &[&str] = &[
    "permanent",
    "not temporar",
    "non-temporar",
    "not a temporar",
    "do not try",
    "don't try",
    "not retry",
    "will not succeed",
    "disposable",
    "temporary email",
    "temporary e-mail",
    "temporary address",
    "temporary alias",
    "temporary mailbox",
    "temporary inbox",
    "temporary account",
    "临时邮箱",
    "臨時郵箱",
    "temporäre e-mail",
    "e-mail temporaire",
    "adresses e-mail temporaires",
    "временные почтовые",
    "временный адрес",
    "временные адреса",
    "endgültig",
    "ne pas réessayer",
    "ne réessayez pas",
    "nicht später",
    "nicht erneut",
    "no vuelva a intentar",
    "não tente novamente",
    "non riprovare",
    "не повторяйте",
    "请勿重试",
    "不要重试",
    "nicht vorübergehend",
    "trvale",
    "permanen",
    "definitief",
    "μόνιμ",
    "постійн",
    "na stałe",
    "vĩnh viễn",
    "恒久",
    // false friends: "at the latest", "no later than", "timestamp"
    "au plus tard",
    "al più tardi",
    "cel mai târziu",
    "не позже",
    "не пізніше",
    "не по-късно",
    "не позднее",
    "nie później niż",
    "временная метка",
    "dauerhaft",
    "definitiv",
    "définiti",
    "kalıcı",
    "trwały",
    "trwale",
    "pysyv",
    "véglege",
    "wegwerf",
    "jetable",
    "desechable",
    "descartáve",
    "одноразов",
    "постоян",
    "不是暂时",
    "永久",
    "永続",
    "영구",
];

/// Words of refusal that make a bounce without any code final when no rule decides it ("Server
/// refused the message", "Spoofed MAIL FROM"), unless a word of [`PASSING_WORDS`] is also there.
/// Each is the start of a word: "refus" reads "refused" and "refusal".
const REFUSAL_WORDS: &[&str] = &[
    "refus",
    "reject",
    "denied",
    "deny",
    "not accept",
    "doesn't accept",
    "not allowed",
    "prohibit",
    "not permitted",
    "violat",
    "invalid",
    "not support",
    "unsupported",
    "bounced",
    "suspended",
    "disabled",
    "spoof",
    "forbidden",
    "blocked",
    "banned",
    "not authorized",
    "not authorised",
    "no such",
    "not exist",
    "doesn't exist",
    "not match",
    "not valid",
    "too large",
    "too big",
    // a failure notice without its reason: "Undelivered Mail Returned to Sender", "Your message
    // couldn't be delivered"
    "returned to sender",
    "returning message to sender",
    "couldn't be delivered",
    "could not be delivered",
    "undeliverable",
    // German
    "abgelehnt",
    "abgewiesen",
    "zurückgewiesen",
    "verweigert",
    "nicht erlaubt",
    "nicht zugelassen",
    "gesperrt",
    "ungültig",
    // French ("refus" above)
    "rejet",
    "interdit",
    "non autorisé",
    "bloqué",
    // Spanish and Portuguese
    "rechaz",
    "denegad",
    "no permitid",
    "prohibid",
    "bloquead",
    "inválid",
    "no válid",
    "rejeitad",
    "recusad",
    "proibid",
    "não permitid",
    // Italian
    "rifiutat",
    "respint",
    "bloccat",
    "vietat",
    "non valid",
    "non consentit",
    // Dutch
    "geweigerd",
    "afgewezen",
    "geblokkeerd",
    "ongeldig",
    "niet toegestaan",
    // Polish, Czech
    "odrzucon",
    "odmow",
    "zablokowan",
    "nieprawidłow",
    "niedozwolon",
    "odmítnut",
    "zamítnut",
    "zablokován",
    "neplatn",
    // Swedish, Danish and Norwegian, Finnish
    "avvisad",
    "nekad",
    "blockerad",
    "ogiltig",
    "afvist",
    "avvist",
    "ugyldig",
    "hylätty",
    "estetty",
    // Hungarian, Turkish, Greek
    "elutasít",
    "letiltott",
    "érvénytelen",
    "reddedil",
    "engellen",
    "geçersiz",
    "απορρίφθηκε",
    "απορρίπτ",
    // Russian, Ukrainian
    "отклон",
    "отказ",
    "запрещ",
    "заблокирован",
    "недопустим",
    "відхилен",
    "заборон",
    "заблоков",
    // Korean, Vietnamese, Indonesian and Malay, Arabic, Hebrew
    "거부",
    "차단",
    "bị từ chối",
    "ditolak",
    "diblokir",
    "مرفوض",
    "נדחה",
];

/// [`REFUSAL_WORDS`] in Japanese and Chinese, read anywhere in the text.
const REFUSAL_CJK: &[&str] = &[
    "拒否", "拒絶", "拒绝", "拒絕", "禁止", "無効", "无效", "無效", "退回",
];

/// Words of a condition that may pass (a failing system, a limit, a wait). A bounce without codes
/// that no rule decides is retried only with one of them or of [`TEMPORARY_WORDS`] ("Connection
/// refused", "blocked for a while", "rejected: mailbox full"); without, it is final.
const PASSING_WORDS: &[&str] = &[
    "try again",
    "retry",
    "retried",
    "still trying",
    "warning",
    "later",
    "timed out",
    "timeout",
    "time out",
    "busy",
    "connect",
    "unreachable",
    "not reachable",
    "respond",
    "response",
    "dropped",
    "closed",
    "broken",
    "failing",
    "fail",
    "error",
    "crash",
    "backend",
    "queue",
    "quota",
    "is full",
    "mailbox full",
    "box full",
    "disk full",
    "space",
    "storage",
    "disk",
    "exceed",
    "limit",
    "rate",
    "throttl",
    "defer",
    "postpon",
    "delay",
    "lookup",
    "dns",
    "resolv",
    "network",
    "route",
    "routing",
    "load",
    "unavailable",
    "not ready",
    "down",
    "offline",
    "answer",
    "went away",
    "hung up",
    "permission",
    // TLS, which a sender retries over TLS; a congested, overloaded, busy or resting receiver;
    // its own processes, locks, files and sockets; a greeting that never came; a delivery still
    // pending, or one that expired in a queue; a mailbox at capacity
    "tls",
    "ssl",
    "starttls",
    "certificate",
    "handshake",
    "congest",
    "overload",
    "paused",
    "maintenance",
    "shutdown",
    "shut down",
    "resources",
    "memory",
    "greeting",
    "welcome message",
    "errno",
    "died",
    "abort",
    "lock",
    "in use",
    "socket",
    "address family",
    "pending",
    "keep trying",
    "continue trying",
    "continues trying",
    "be attempted",
    "being attempted",
    "attempted again",
    "stopped trying",
    "message has expired",
    "message expire",
    "migrat",
    "in progress",
    "out of service",
    "lifetime",
    "elapsed",
    "too old",
    "capacity",
    "full ",
    "fuld ",
    "vol ",
    "overfull",
    "overflow",
    "frequency",
    "flood",
    "come back",
    // "delayed", "overloaded", "busy" and "does not answer" in German, French, Spanish,
    // Portuguese, Italian, Dutch, Polish, Russian, Swedish, Danish, Norwegian, Finnish, Czech,
    // Turkish, Korean
    "verzöger",
    "noch nicht",
    "wird noch",
    "pas encore",
    "continuer à",
    "todavía no",
    "seguiremos intentando",
    "ainda não",
    "continuaremos",
    "ancora",
    "continueremo",
    "nog niet",
    "jeszcze",
    "kontynuowan",
    "еще не",
    "ещё не",
    "продолж",
    "försen",
    "überlastet",
    "antwortet nicht",
    "retard",
    // with its end: folded, "differe" would start English "different"
    "différé ",
    "différée",
    "surcharg",
    "occupé",
    "ne répond pas",
    "retrasad",
    "demorad",
    "ocupado",
    "sobrecargad",
    "no responde",
    "atrasad",
    "não responde",
    "ritard",
    "sovraccaric",
    "non risponde",
    "vertraagd",
    "bezet",
    "opóźn",
    "задерж",
    "перегруж",
    "занят",
    "fördröj",
    "forsink",
    "viivästy",
    "zpožd",
    "gecik",
    "지연",
    "사용 중",
    "응답",
    // "error", "full", "connection", "unavailable", "exceeded", "too many" in German, French,
    // Spanish, Portuguese, Italian, Dutch, Polish, Russian, Czech, Swedish, Turkish, Korean
    "fehler",
    "voll ",
    "voll.",
    "verbindung",
    "nicht erreichbar",
    "nicht verfügbar",
    "überschritten",
    "zu viele",
    "erreur",
    "plein ",
    "pleine ",
    "pleine.",
    "connexion",
    "indisponible",
    "dépass",
    "trop de",
    "cuota",
    "lleno",
    "llena",
    "conexi",
    "no disponible",
    "excedid",
    "demasiad",
    "erro ",
    "erros",
    "cheia",
    "indisponíve",
    "pien",
    "connession",
    "non disponibile",
    "superat",
    "troppi",
    "fout",
    "verbinding",
    "niet beschikbaar",
    "te veel",
    "błąd",
    "pełn",
    "połączeni",
    "niedostępn",
    "przekroczon",
    "zbyt wiele",
    "ошибк",
    "переполн",
    "соединени",
    "подключени",
    "недоступ",
    "превыш",
    "слишком много",
    "chyb",
    "hata",
    "bağlantı",
    "오류",
    "연결",
    "초과",
];

/// [`PASSING_WORDS`] in Japanese and Chinese, read anywhere in the text.
const PASSING_CJK: &[&str] = &[
    "エラー",
    "错误",
    "錯誤",
    "満杯",
    "已满",
    "已滿",
    "容量",
    "接続",
    "连接",
    "連線",
    "超过",
    "超過",
    "超出",
    "制限",
    "頻繁",
    "频繁",
    "過多",
    "过多",
    // "delayed", "busy", "crowded", "no response"
    "遅延",
    "まだ",
    "引き続き",
    "尚未",
    "继续",
    "繼續",
    "一杯",
    "满了",
    "滿了",
    "延迟",
    "延遲",
    "繁忙",
    "混雑",
    "ビジー",
    "无响应",
    "無回應",
];

/// The words of [`PERMANENT_WORDS`] the text says.
pub(super) fn says_permanent(lower: &str) -> Option<&'static str> {
    first_anywhere(lower, &PERMANENT)
}

/// The words of [`TEMPORARY_WORDS`] the text says, unless it also calls the failure permanent
/// ("permanent error", "not a temporary failure").
pub(super) fn says_temporary(lower: &str) -> Option<&'static str> {
    if denies_temporary(lower) {
        return None;
    }
    // Addresses and links are names, not words: "<temporary@example.com>", ".../temporary-errors".
    let words = without_names(lower);
    word_start_of(&words, &TEMPORARY).or_else(|| anywhere(&words, TEMPORARY_CJK))
}

/// Whether the text says the failure is not temporary ([`NOT_TEMPORARY`]), read without accents
/// too, as the temporary words are ("nicht spater erneut").
fn denies_temporary(lower: &str) -> bool {
    first_anywhere(lower, &DENIALS).is_some()
}

/// The word of refusal ([`REFUSAL_WORDS`], [`REFUSAL_CJK`]) the text says. Read only where
/// [`passes`] found no condition that may pass.
pub(super) fn refusal_word(lower: &str) -> Option<&'static str> {
    word_start_of(lower, &REFUSAL).or_else(|| anywhere(lower, REFUSAL_CJK))
}

/// The word of a condition that may pass ([`PASSING_WORDS`], [`TEMPORARY_WORDS`] unless the text
/// denies it is temporary) the text says. Addresses and links are names, not words
/// ("<bob@connect.example.org>"); the text ends with a space, so that a word listed with its end
/// ("voll ") is read at the end too.
pub(super) fn passes(lower: &str) -> Option<&'static str> {
    let words = without_names(lower) + " ";
    let temporary = !denies_temporary(lower);
    word_start_of(&words, &PASSING)
        .or_else(|| {
            temporary
                .then(|| word_start_of(&words, &TEMPORARY))
                .flatten()
        })
        .or_else(|| anywhere(&words, PASSING_CJK))
        .or_else(|| temporary.then(|| anywhere(&words, TEMPORARY_CJK)).flatten())
}

/// The text without its addresses and links (see [`is_a_name`]).
fn without_names(lower: &str) -> String {
    lower
        .split_whitespace()
        .filter(|t| !is_a_name(t))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A list of words, found with or without their accents ([`fold`](super::smtp::fold)), in one
/// pass.
struct Words {
    words: &'static [&'static str],
    patterns: LazyLock<Patterns>,
}

macro_rules! words {
    ($list:ident) => {
        Words {
            words: $list,
            patterns: LazyLock::new(|| Patterns::new($list.iter().copied())),
        }
    };
}

static PERMANENT: Words = words!(PERMANENT_WORDS);
static DENIALS: Words = words!(NOT_TEMPORARY);
static TEMPORARY: Words = words!(TEMPORARY_WORDS);
static PASSING: Words = words!(PASSING_WORDS);
static REFUSAL: Words = words!(REFUSAL_WORDS);

/// The first word of `words` (in their order) that starts a word of `lower`, with or without its
/// accents.
fn word_start_of(lower: &str, words: &Words) -> Option<&'static str> {
    let mut first: Option<usize> = None;
    words.patterns.each_hit(lower, |n, text, start| {
        let starts_a_word = !text[..start].chars().next_back().is_some_and(is_word);
        if starts_a_word && first.is_none_or(|f| n < f) {
            first = Some(n);
        }
    });
    first.map(|n| words.words[n])
}

/// The first word of `words` (in their order) found anywhere in `lower`, with or without its
/// accents, unless a negation comes right before it ([`negated`]).
fn first_anywhere(lower: &str, words: &Words) -> Option<&'static str> {
    let mut first: Option<usize> = None;
    words.patterns.each_hit(lower, |n, text, start| {
        if !negated(&text[..start]) && first.is_none_or(|f| n < f) {
            first = Some(n);
        }
    });
    first.map(|n| words.words[n])
}

/// Whether `before` (the text up to a word) ends with a negation of that word: a prefix written
/// onto it ("non-permanent", "impermanent") or a word before it, apart or hyphenated ("not a
/// permanent failure", "(never permanent)", "not-permanent").
fn negated(before: &str) -> bool {
    let apart = before.trim_end_matches(|c: char| c.is_whitespace() || c == '-');
    ["non", "im", "un"]
        .iter()
        .any(|prefix| ends_with_word(before.strip_suffix('-').unwrap_or(before), prefix))
        || apart.len() < before.len()
            && ["not", "not a", "never", "non"]
                .iter()
                .any(|word| ends_with_word(apart, word))
}

/// The first of `words` found anywhere in `lower` (scripts without spaces between words).
fn anywhere<'w>(lower: &str, words: &[&'w str]) -> Option<&'w str> {
    words.iter().copied().find(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::smtp::fold;

    /// Every word of every list reads where a reply puts it: after a space, and (for the lists
    /// read anywhere) glued to other characters of its script.
    #[test]
    fn every_listed_word_is_read_in_a_reply() {
        // (an earlier word may match first once folded: "temporär" is read as "temporar")
        let read_as =
            |found: Option<&str>, w: &str| found.is_some_and(|f| fold(w).starts_with(&*fold(f)));
        for w in TEMPORARY_WORDS {
            let text = format!("blocked, {w} x");
            assert!(read_as(says_temporary(&text), w), "{text}");
        }
        for w in TEMPORARY_CJK {
            let text = format!("受信{w}できません");
            assert_eq!(says_temporary(&text), Some(*w), "{text}");
        }
        for w in NOT_TEMPORARY {
            let text = format!("blocked temporarily, {w}");
            assert_eq!(says_temporary(&text), None, "{text}");
        }
        for w in REFUSAL_WORDS {
            let text = format!("the message was {w} here");
            assert!(read_as(refusal_word(&text), w), "{text}");
        }
        for w in REFUSAL_CJK {
            let text = format!("邮件{w}了");
            assert_eq!(refusal_word(&text), Some(*w), "{text}");
        }
        for w in PASSING_WORDS.iter().chain(TEMPORARY_WORDS) {
            let text = format!("the message was refused: {w} x");
            assert!(passes(&text).is_some(), "{text}");
        }
        for w in PASSING_CJK.iter().chain(TEMPORARY_CJK) {
            let text = format!("邮件被拒绝{w}了");
            assert!(passes(&text).is_some(), "{text}");
        }
        for w in PERMANENT_WORDS {
            assert!(read_as(says_permanent(&format!("x {w} y")), w), "{w}");
        }
    }

    /// The one-pass search finds, for each list and each reply of the fixture corpus (and some
    /// replies with and without accents), the first word in list order that a scan of each word
    /// and its folded form finds at the start of a word (anywhere, for the permanent words and
    /// the words that deny a temporary failure).
    #[test]
    fn the_one_pass_search_finds_the_first_listed_word() {
        let mut texts: Vec<String> = super::super::phrases::fixture_replies()
            .iter()
            .map(|t| t.to_lowercase())
            .collect();
        texts.extend(
            [
                "zustellung vorubergehend gestort",
                "später erneut",
                "différée, retry later",
                "nicht später erneut versuchen",
                "echec permanent, nicht spater erneut",
                // words of the lists inside other words: found by the searches that read
                // anywhere, unless negated
                "a semipermanent failure",
                "an impermanent glitch",
                "a nonpermanent failure, try later",
            ]
            .map(str::to_owned),
        );
        // Where `w` occurs in `text`: anywhere unless negated, or only at the start of a word.
        let found = |text: &str, w: &str, at_start: bool| {
            text.match_indices(w).any(|(at, _)| {
                let before = &text[..at];
                if at_start {
                    !before.chars().next_back().is_some_and(is_word)
                } else {
                    !negated(before)
                }
            })
        };
        type Search = fn(&str, &Words) -> Option<&'static str>;
        let lists: [(&Words, Search, bool); 5] = [
            (&PERMANENT, first_anywhere, false),
            (&DENIALS, first_anywhere, false),
            (&TEMPORARY, word_start_of, true),
            (&PASSING, word_start_of, true),
            (&REFUSAL, word_start_of, true),
        ];
        for (list, search, at_start) in lists {
            for text in &texts {
                let folded = fold(text);
                let scanned = list
                    .words
                    .iter()
                    .copied()
                    .find(|w| found(text, w, at_start) || found(&folded, &fold(w), at_start));
                assert_eq!(search(text, list), scanned, "{text}");
            }
        }
    }

    /// A permanent word with a negation right before it ("non-permanent", "impermanent", "not a
    /// permanent failure") neither calls the failure permanent nor denies a temporary one.
    #[test]
    fn a_negated_permanent_word_is_not_read() {
        for text in [
            "non-permanent error, will retry later",
            "a nonpermanent error; retry later",
            "impermanent failure, try again later",
            "this is not a permanent error, try again later",
            "temporary (not permanent) failure, try again later",
            "échec non permanent, réessayez plus tard",
            "a not-permanent failure, retry later",
            "never - permanent; try later",
        ] {
            assert_eq!(says_permanent(text), None, "{text}");
            assert!(!denies_temporary(text), "{text}");
            assert!(passes(text).is_some(), "{text}");
        }
        for text in [
            "permanent error",
            "550 permanent failure: not a valid address",
            "échec permanent",
            "a permanent error, not temporary",
        ] {
            assert!(
                says_permanent(text).is_some() || denies_temporary(text),
                "{text}"
            );
        }
        assert_eq!(
            says_permanent("mail not delivered, permanent error"),
            Some("permanent error")
        );
        assert!(!negated("a "));
        assert!(!negated(""));
        assert!(negated("this is not a "));
        assert!(negated("a not-"));
        assert!(!negated("it is a "));
        assert!(!negated("a knot-"));
    }

    /// A listed word must start a word: "contemporarily" is not "temporar", "unrefused" not
    /// "refus", "against" not "again"; "ungültiger" starts with "ungültig".
    #[test]
    fn a_word_must_start_a_word() {
        assert_eq!(says_temporary("blocked contemporarily"), None);
        assert_eq!(refusal_word("the message was unrefused"), None);
        assert!(refusal_word("refused, against the rules").is_some());
        assert_eq!(
            refusal_word("Nachricht abgelehnt: ungültiger Absender"),
            Some("abgelehnt")
        );
    }
}
