use proptest::prelude::*;

use super::*;

/// What lettre's parser makes of `src`: the name, user and domain, or its error's text.
fn lettre_view(src: &str) -> Result<(Option<String>, String, String), String> {
    src.parse::<lettre::message::Mailbox>()
        .map(|m| {
            (
                m.name,
                m.email.user().to_owned(),
                m.email.domain().to_owned(),
            )
        })
        .map_err(|e| e.to_string())
}

fn core_view(src: &str) -> Result<(Option<String>, String, String), String> {
    src.parse::<Mailbox>()
        .map(|m| {
            (
                m.name,
                m.email.user().to_owned(),
                m.email.domain().to_owned(),
            )
        })
        .map_err(|e| e.to_string())
}

#[test]
fn the_forms_a_job_uses_parse_into_name_user_and_domain() {
    let m: Mailbox = "Shop <shop@example.com>".parse().unwrap();
    assert_eq!(m.name.as_deref(), Some("Shop"));
    assert_eq!((m.email.user(), m.email.domain()), ("shop", "example.com"));
    assert_eq!(m.email.to_string(), "shop@example.com");
    let m: Mailbox = "  ann@example.org ".parse().unwrap();
    assert_eq!(m.name, None);
    assert_eq!(m.email.to_string(), "ann@example.org");
    let m: Mailbox = "\"Doe, John\" <john@exämple.de>".parse().unwrap();
    assert_eq!(m.name.as_deref(), Some("Doe, John"));
    assert_eq!(m.email.domain(), "exämple.de");
}

#[test]
fn a_mailbox_prints_in_the_form_it_parses_back_from() {
    for (src, shown) in [
        ("ann@example.org", "ann@example.org"),
        ("Shop <shop@example.com>", "Shop <shop@example.com>"),
        (
            "\"Doe, John\" <j@example.com>",
            "\"Doe, John\" <j@example.com>",
        ),
        (
            "\"say \\\"hi\\\"\" <j@example.com>",
            "\"say \\\"hi\\\"\" <j@example.com>",
        ),
        ("\"\" <j@example.com>", "j@example.com"),
    ] {
        let m: Mailbox = src.parse().unwrap();
        assert_eq!(m.to_string(), shown, "{src}");
        assert_eq!(m.to_string().parse::<Mailbox>().unwrap().email, m.email);
    }
}

#[test]
fn each_refusal_names_its_reason() {
    assert_eq!("".parse::<Mailbox>(), Err(AddressError::InvalidInput));
    assert_eq!(
        "no at sign".parse::<Mailbox>(),
        Err(AddressError::InvalidInput)
    );
    assert_eq!(
        "a@b <c@d>".parse::<Mailbox>(),
        Err(AddressError::InvalidInput)
    );
    assert_eq!(
        "a@-bad-.com".parse::<Mailbox>(),
        Err(AddressError::InvalidDomain)
    );
    assert_eq!(
        format!("{}@example.com", "x".repeat(65)).parse::<Mailbox>(),
        Err(AddressError::InvalidUser)
    );
}

/// Inputs chosen for the grammar's corners: quoting, obsolete forms, white space, comments,
/// literals, internationalised names and domains, and what a producer gets wrong.
const CORNERS: &[&str] = &[
    "a@b.c",
    "a.b.c@d.e",
    "a..b@c.d",
    ".a@b.c",
    "a.@b.c",
    "\"a b\"@c.d",
    "\"a\\\"b\"@c.d",
    "\"a  b\"@c.d",
    "\"\"@c.d",
    "a.\"b\"@c.d",
    "\"a\".b@c.d",
    "a@b",
    "a@b.",
    "a@.b",
    "a@b..c",
    "a@[1.2.3.4]",
    "a@[::1]",
    "a@[IPv6:::1]",
    "a@1.2.3.4",
    "a @b.c",
    "a@ b.c",
    "a@b.c ",
    " a@b.c",
    "\ta@b.c\n",
    "<a@b.c>",
    " <a@b.c> ",
    "< a@b.c>",
    "<a@b.c >",
    "Name <a@b.c>",
    "Name<a@b.c>",
    "First Last <a@b.c>",
    "First  Last <a@b.c>",
    "First\tLast <a@b.c>",
    "\"Quoted Name\" <a@b.c>",
    "Name \"Quoted\" <a@b.c>",
    "\"\" <a@b.c>",
    "J. R. Doe <a@b.c>",
    "Dr.Who <a@b.c>",
    "Name (comment) <a@b.c>",
    "a@b.c (comment)",
    "Name <a@b.c> trailing",
    "Name <a@b.c",
    "Name a@b.c>",
    "Name <<a@b.c>>",
    "a@b.c, d@e.f",
    "Ünïcödé <a@b.c>",
    "用户@例子.广告",
    "a@例子.广告",
    "a@xn--fsqu00a.xn--3lr804guic",
    "a@ex ample.com",
    "a@exa_mple.com",
    "a@-example.com",
    "a@example-.com",
    "a@example.c-m",
    "user+tag@example.com",
    "!#$%&'*+-/=?^_`{|}~@example.com",
    "a\u{7f}@b.c",
    "\"a\u{1}\"@b.c",
    "\"a\\\u{0}\"@b.c",
    "Name\u{2028} <a@b.c>",
    "Name\r\n <a@b.c>",
    "=?utf-8?q?Name?= <a@b.c>",
    "a@b.c\u{0}",
    "@b.c",
    "a@",
    "@",
    "<>",
    "\"unterminated <a@b.c>",
];

#[test]
fn the_core_accepts_and_reads_exactly_what_lettre_does_on_the_corners() {
    for src in CORNERS {
        assert_eq!(core_view(src), lettre_view(src), "{src:?}");
    }
}

fn piece() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a",
        "bc",
        "x1",
        ".",
        "@",
        "<",
        ">",
        "\"",
        " ",
        "\t",
        "\\",
        "(",
        ")",
        ",",
        ":",
        ";",
        "[",
        "]",
        "-",
        "_",
        "+",
        "é",
        "日",
        "\u{7f}",
        "\u{1}",
        "\n",
        "1.2.3.4",
        "example.com",
        "xn--",
        "=?",
        "!",
        "'",
    ])
    .prop_map(str::to_owned)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn the_core_agrees_with_lettre_on_generated_inputs(
        parts in prop::collection::vec(piece(), 0..12)
    ) {
        let src = parts.concat();
        prop_assert_eq!(core_view(&src), lettre_view(&src), "{:?}", src);
    }

    #[test]
    fn the_core_agrees_with_lettre_on_generated_mailboxes(
        name in prop::collection::vec(piece(), 0..4),
        user in prop::collection::vec(piece(), 1..4),
        domain in prop::collection::vec(piece(), 1..4),
        angle in any::<bool>(),
    ) {
        let addr = format!("{}@{}", user.concat(), domain.concat());
        let src = if angle { format!("{} <{addr}>", name.concat()) } else { addr };
        prop_assert_eq!(core_view(&src), lettre_view(&src), "{:?}", src);
    }
}

#[test]
fn address_keys_are_the_bare_lower_cased_ascii_address() {
    for (raw, key) in [
        ("ann@example.com", "ann@example.com"),
        ("  Ann@Example.COM ", "ann@example.com"),
        ("Ann Example <Ann@Example.com>", "ann@example.com"),
        ("\"Example, Ann\" <ann@example.com>", "ann@example.com"),
        ("k@bücher.example", "k@xn--bcher-kva.example"),
        ("K <k@BÜCHER.example>", "k@xn--bcher-kva.example"),
        ("k@xn--bcher-kva.example", "k@xn--bcher-kva.example"),
        // not a mailbox: as written, trimmed and lower-cased
        (" Not An Address ", "not an address"),
    ] {
        assert_eq!(address_key(raw), key, "{raw}");
    }
}

#[test]
fn redacted_text_names_no_address_and_keeps_the_rest() {
    let reply = "550 5.1.1 <Ann@Example.org>: Recipient address rejected: ann@example.org unknown.";
    let redacted = redact(reply);
    assert!(!redacted.to_lowercase().contains("ann@"), "{redacted}");
    let hash = address_hash("ann@example.org");
    // Both spellings hash alike; the reply's words and punctuation stay.
    assert_eq!(redacted.matches(&hash).count(), 2, "{redacted}");
    assert!(redacted.starts_with("550 5.1.1 <<addr:"), "{redacted}");
    assert!(redacted.ends_with(" unknown."), "{redacted}");
    assert!(
        redacted.contains(">: Recipient address rejected: "),
        "{redacted}"
    );
    // Text without an address is unchanged.
    assert_eq!(
        redact("421 4.7.0 try again later"),
        "421 4.7.0 try again later"
    );
    // A display-name mailbox error (as a rejection reports it) loses the address too.
    let error = r#"address in `to` is invalid: "Bob <bob@@example.org>": bad"#;
    assert!(!redact(error).contains("bob@"), "{}", redact(error));
}

/// The panic hook's line (`redact_panic_messages`): the message redacted, whether the panic
/// was a literal or formatted, with its location; the default hook would print it in clear.
#[test]
fn a_panic_line_names_no_address_and_says_where() {
    let here = std::panic::Location::caller();
    let hash = address_hash("ann@example.org");
    let literal = panic_line(&"template bug rendering for ann@example.org", Some(here));
    let formatted = panic_line(
        &String::from("adapter bug after sending to Ann@Example.org"),
        None,
    );
    for line in [&literal, &formatted] {
        assert!(!line.to_lowercase().contains("ann@"), "{line}");
        assert!(line.contains(&hash), "{line}");
    }
    assert!(
        literal.starts_with(&format!("panicked at {}:{}:", here.file(), here.line())),
        "{literal}"
    );
    assert_eq!(
        formatted,
        format!("panicked: adapter bug after sending to <addr:{hash}>")
    );
    assert_eq!(
        panic_line(&42_u32, None),
        "panicked: a panic without a message"
    );
}

#[test]
fn allowed_senders_match_addresses_and_domains_however_written() {
    let allowed =
        AllowedSenders::parse("Shop@Example.com, news.example.org, bücher.example").unwrap();
    assert!(allowed.allows("shop@example.com"));
    assert!(allowed.allows("Shop <SHOP@example.COM>"));
    assert!(allowed.allows("Anyone <anyone@news.example.org>"));
    assert!(allowed.allows("info@xn--bcher-kva.example"));
    assert!(
        !allowed.allows("other@example.com"),
        "only that address of example.com"
    );
    assert!(!allowed.allows("shop@evil.example"));
    assert!(
        !allowed.allows("x@sub.news.example.org"),
        "a domain is not its subdomains"
    );
    for bad in [
        "",
        "a@b.com,,c.com",
        "not-a-domain",
        "@nope",
        "*.example.com",
    ] {
        assert!(AllowedSenders::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn domains_that_mix_scripts_are_flagged_and_real_ones_pass() {
    // Look-alikes: Latin with Cyrillic or Greek in one label, in Unicode or in xn-- form.
    for (domain, label) in [
        ("\u{430}pple.example", "\u{430}pple"),
        ("xn--pple-43d.example", "\u{430}pple"),
        ("shop.p\u{430}ypal.example", "p\u{430}ypal"),
        ("g\u{3bf}\u{3bf}gle.example", "g\u{3bf}\u{3bf}gle"),
        ("\u{441}\u{430}fe-bank.example", "\u{441}\u{430}fe-bank"),
    ] {
        assert_eq!(
            mixed_script_label(domain).as_deref(),
            Some(label),
            "{domain}"
        );
    }
    // Real internationalised domains: one script, or Japanese (Han, Hiragana, Katakana and
    // Latin), digits and hyphens joining any of them; ASCII is never flagged.
    for domain in [
        "example.com",
        "b\u{fc}cher.example",
        "xn--bcher-kva.example",
        "\u{43f}\u{440}\u{438}\u{43c}\u{435}\u{440}.\u{440}\u{444}",
        "\u{4f8b}\u{3048}.\u{30c6}\u{30b9}\u{30c8}",
        "\u{65e5}\u{672c}\u{8a9e}-abc2.example",
        "\u{3b5}\u{3bb}\u{3bb}\u{3ac}\u{3b4}\u{3b1}-24.example",
        "m\u{fc}nchen-2026.example",
        "[192.0.2.1]",
    ] {
        assert_eq!(mixed_script_label(domain), None, "{domain}");
    }
}

#[test]
fn a_reply_names_an_address_only_as_a_whole() {
    let reply = "permanent error (550): 5.1.1 <unknown@courier.test>: recipient address rejected";
    assert!(names_address(reply, "unknown@courier.test"));
    assert!(
        names_address(reply, "Unknown@Courier.TEST"),
        "case-insensitive"
    );
    assert!(
        !names_address(reply, "known@courier.test"),
        "inside a longer local part"
    );
    assert!(
        !names_address(reply, "unknown@courier.tes"),
        "inside a longer domain"
    );
    assert!(names_address(
        "550 5.1.1 ann@x.example user unknown",
        "ann@x.example"
    ));
    assert!(!names_address("550 5.1.1 user unknown", "ann@x.example"));
    assert!(!names_address("550 5.1.1 user unknown", ""), "no address");
}
