//! The send function's settings: parsing, defaults and every error.

use super::*;
use std::collections::HashMap;

fn base() -> HashMap<&'static str, String> {
    [
        ("COURIER_QUEUE_URL", "q"),
        ("COURIER_DEAD_LETTER_QUEUE_URL", "dlq"),
        ("COURIER_LETTER_INDEX_TABLE", "idx"),
        ("COURIER_STATUS_TABLE", "s"),
        ("COURIER_SUPPRESSION_TABLE", "sup"),
        ("COURIER_CONTROL_TABLE", "b"),
        ("COURIER_TEMPLATE_BUCKET", "t"),
        ("COURIER_DELAY_STATE_MACHINE_ARN", "arn"),
        ("COURIER_PAYLOAD_BUCKET", "payloads"),
        ("COURIER_ENVELOPE_KEY_SECRET", "seal"),
        ("COURIER_OUTCOME_BUS", "bus"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_owned()))
    .collect()
}

fn parse(
    env: &HashMap<&'static str, String>,
) -> Result<(SendConfig, Resources, RetryPolicy), ConfigError> {
    SendConfig::from_lookup(|k| env.get(k).cloned())
}

#[test]
fn resource_env_is_what_the_function_reads() {
    let (_, resources, _) = parse(&base()).unwrap();
    let env: HashMap<&'static str, String> = resources.resource_env().into_iter().collect();
    assert_eq!(env, base());
    let (_, again, _) = parse(&env).unwrap();
    assert_eq!(again.resource_env(), resources.resource_env());
    assert_eq!(resources.outcome_bus.as_deref(), Some("bus"));
    // Without a bus (or with an empty one), outcomes are not published.
    let mut env = base();
    env.insert("COURIER_OUTCOME_BUS", String::new());
    assert_eq!(parse(&env).unwrap().1.outcome_bus, None);
}

/// Copies that wait go to the retry queue (the template's `RetryQueue`, its own event source);
/// without one (unset or empty), back to the send queue.
#[test]
fn copies_that_wait_go_to_the_retry_queue_when_there_is_one() {
    let (_, without, _) = parse(&base()).unwrap();
    assert_eq!(without.requeue_url(), without.queue_url);
    let mut env = base();
    env.insert("COURIER_RETRY_QUEUE_URL", String::new());
    assert_eq!(parse(&env).unwrap().1.retry_queue_url, None);
    env.insert("COURIER_RETRY_QUEUE_URL", "https://sqs/retry".into());
    let (_, with, _) = parse(&env).unwrap();
    assert_eq!(with.requeue_url(), "https://sqs/retry");
    let written: HashMap<&'static str, String> = with.resource_env().into_iter().collect();
    assert_eq!(written, env);
}

#[test]
fn defaults_and_overrides() {
    let (config, resources, _) = parse(&base()).unwrap();
    assert_eq!(config.concurrency, 10);
    assert_eq!(config.archive_retention_days, 365);
    assert_eq!(resources.providers, vec![Provider::Ses]);
    let mut env = base();
    env.insert("COURIER_AMBIGUITY_GRACE", "20m".into());
    env.insert("COURIER_PROVIDERS", "smtp, ses".into());
    env.insert("COURIER_SMTP_HOST", "relay".into());
    env.insert("COURIER_ARCHIVE_RETENTION_DAYS", "731".into());
    let (config, resources, _) = parse(&env).unwrap();
    assert_eq!(config.archive_retention_days, 731);
    assert_eq!(config.ambiguity_grace, Duration::from_secs(1200));
    assert_eq!(resources.providers, vec![Provider::Smtp, Provider::Ses]);
    assert_eq!(resources.smtp.unwrap().port, 587);
}

#[test]
fn the_retry_horizon_and_the_live_settings_cache_are_read_and_checked() {
    let (config, _, _) = parse(&base()).unwrap();
    assert_eq!(config.retry_horizon, Some(Duration::from_millis(200)));
    assert_eq!(config.live_settings_cache, Duration::from_secs(30));
    let mut env = base();
    env.insert("COURIER_RETRY_HORIZON", "500ms".into());
    env.insert("COURIER_LIVE_SETTINGS_CACHE", "5s".into());
    let (config, _, _) = parse(&env).unwrap();
    assert_eq!(config.retry_horizon, Some(Duration::from_millis(500)));
    env.insert("COURIER_SEND_RATE_MAX_AHEAD", "5s".into());
    env.insert("COURIER_RETRY_HORIZON", "2s".into());
    assert_eq!(
        parse(&env).unwrap().0.retry_horizon,
        Some(Duration::from_secs(2))
    );
    assert_eq!(config.live_settings_cache, Duration::from_secs(5));
    env.insert("COURIER_RETRY_HORIZON", "off".into());
    assert_eq!(parse(&env).unwrap().0.retry_horizon, None);
    // Unset with a 200 ms booking horizon: fresh mail would have no room beyond retries, no lane.
    let mut env = base();
    env.insert("COURIER_SEND_RATE_MAX_AHEAD", "200ms".into());
    assert_eq!(parse(&env).unwrap().0.retry_horizon, None);
    for (name, value) in [
        ("COURIER_RETRY_HORIZON", "1s"),
        ("COURIER_RETRY_HORIZON", "0"),
        ("COURIER_RETRY_HORIZON", "0ms"),
        ("COURIER_SEND_RATE_MAX_AHEAD", "1.5s"),
        ("COURIER_RETRY_HORIZON", "soon"),
        ("COURIER_LIVE_SETTINGS_CACHE", "2h"),
        ("COURIER_LIVE_SETTINGS_CACHE", "soon"),
    ] {
        let mut env = base();
        env.insert(name, value.into());
        match parse(&env) {
            Err(ConfigError::Invalid { name: n, .. }) => assert_eq!(n, name, "{value}"),
            other => panic!("{name}={value}: {other:?}"),
        }
    }
}

#[test]
fn send_rate_limits_per_provider() {
    let mut env = base();
    env.insert("COURIER_SEND_RATE_SES", "14".into());
    env.insert("COURIER_SEND_RATE_MAX_AHEAD", "3s".into());
    let (config, _, _) = parse(&env).unwrap();
    let ses = config.rate_limits["ses"];
    assert_eq!(ses.per_sec, 14.0);
    assert_eq!(ses.max_ahead, Duration::from_secs(3));
    assert_eq!(ses.chunk, 10);
    assert_eq!(config.ses_quota_pacing, None, "a configured rate wins");
    // none for a provider that is not configured
    env.insert("COURIER_SEND_RATE_SMTP", "5".into());
    assert!(!parse(&env).unwrap().0.rate_limits.contains_key("smtp"));
    // By default SES is paced by its quota (read at INIT), with the configured horizon
    // and chunk; `off` or `0` is the only way to turn pacing off.
    let mut env = base();
    env.insert("COURIER_SEND_RATE_MAX_AHEAD", "4s".into());
    let (config, _, _) = parse(&env).unwrap();
    assert!(config.rate_limits.is_empty());
    let shape = config.ses_quota_pacing.unwrap();
    assert_eq!((shape.max_ahead, shape.chunk), (Duration::from_secs(4), 10));
    for off in ["off", "0", " off "] {
        env.insert("COURIER_SEND_RATE_SES", off.into());
        let (config, _, _) = parse(&env).unwrap();
        assert!(config.rate_limits.is_empty() && config.ses_quota_pacing.is_none());
    }
    env.insert("COURIER_SEND_RATE_SES", "".into());
    assert!(
        parse(&env).unwrap().0.ses_quota_pacing.is_some(),
        "empty is unset"
    );
    // SMTP alone: no SES quota to pace by.
    let mut env = base();
    env.insert("COURIER_PROVIDERS", "smtp".into());
    env.insert("COURIER_SMTP_HOST", "relay".into());
    assert!(parse(&env).unwrap().0.ses_quota_pacing.is_none());
    env.insert("COURIER_SEND_RATE_CHUNK", "0".into());
    assert!(
        matches!(
            parse(&env),
            Err(ConfigError::Invalid {
                name: "COURIER_SEND_RATE_CHUNK",
                ..
            })
        ),
        "checked unpaced too: a live settings document's rates take its shape"
    );
    let mut env = base();
    env.insert("COURIER_SEND_RATE_CHUNK", "0".into());
    assert!(matches!(
        parse(&env),
        Err(ConfigError::Invalid {
            name: "COURIER_SEND_RATE_CHUNK",
            ..
        })
    ));
}

#[test]
fn errors_name_the_variable() {
    let cases: Vec<(&'static str, &str, &str)> = vec![
        ("COURIER_CONCURRENCY", "0", "COURIER_CONCURRENCY"),
        (
            "COURIER_STATUS_WRITE_TRIES",
            "0",
            "COURIER_STATUS_WRITE_TRIES",
        ),
        (
            "COURIER_STATUS_WRITE_TRIES",
            "61",
            "COURIER_STATUS_WRITE_TRIES",
        ),
        (
            "COURIER_STATUS_WRITE_TRIES",
            "often",
            "COURIER_STATUS_WRITE_TRIES",
        ),
        ("COURIER_AMBIGUITY_GRACE", "soon", "COURIER_AMBIGUITY_GRACE"),
        ("COURIER_PROVIDERS", "pigeon", "COURIER_PROVIDERS"),
        ("COURIER_PROVIDERS", "ses,ses", "COURIER_PROVIDERS"),
        ("COURIER_PROVIDERS", " , ", "COURIER_PROVIDERS"),
        ("COURIER_PROVIDERS", "smtp", "COURIER_SMTP_HOST"),
        ("COURIER_RETRY_POLICY_JSON", "{", "retry policy"),
        ("COURIER_SEND_RATE_SES", "fast", "COURIER_SEND_RATE_SES"),
        ("COURIER_SEND_RATE_SES", "-1", "COURIER_SEND_RATE_SES"),
        (
            "COURIER_ARCHIVE_RETENTION_DAYS",
            "forever",
            "COURIER_ARCHIVE_RETENTION_DAYS",
        ),
        (
            "COURIER_SENDER_TEMPLATES",
            "example.com",
            "COURIER_SENDER_TEMPLATES",
        ),
        (
            "COURIER_ARCHIVE_RETENTION_DAYS",
            "0",
            "COURIER_ARCHIVE_RETENTION_DAYS",
        ),
        ("COURIER_SEND_RATE_CHUNK", "many", "COURIER_SEND_RATE_CHUNK"),
        (
            "COURIER_SEND_RATE_MAX_AHEAD",
            "soon",
            "COURIER_SEND_RATE_MAX_AHEAD",
        ),
    ];
    for (k, v, needle) in cases {
        let mut env = base();
        env.insert(k, v.into());
        let err = parse(&env).unwrap_err().to_string();
        assert!(err.contains(needle), "{k}={v}: {err}");
    }
    let mut env = base();
    env.remove("COURIER_STATUS_TABLE");
    assert_eq!(
        parse(&env).unwrap_err().to_string(),
        "COURIER_STATUS_TABLE is required"
    );
    // No unsealed mode: without the seal keys' secret the function does not start.
    let mut env = base();
    env.remove("COURIER_ENVELOPE_KEY_SECRET");
    assert_eq!(
        parse(&env).unwrap_err().to_string(),
        "COURIER_ENVELOPE_KEY_SECRET is required"
    );
}

#[test]
fn the_smtp_tls_mode_is_parsed_once_into_its_enum() {
    let smtp_env = |tls: Option<&str>| {
        let mut env = base();
        env.insert("COURIER_PROVIDERS", "smtp".into());
        env.insert("COURIER_SMTP_HOST", "relay.example".into());
        if let Some(tls) = tls {
            env.insert("COURIER_SMTP_TLS", tls.into());
        }
        env
    };
    for (tls, want) in [
        (None, SmtpSecurity::StartTls),
        (Some("starttls"), SmtpSecurity::StartTls),
        (Some("tls"), SmtpSecurity::Tls),
        (Some("none"), SmtpSecurity::None),
    ] {
        let (_, resources, _) = parse(&smtp_env(tls)).unwrap();
        assert_eq!(resources.smtp.unwrap().tls, want, "{tls:?}");
    }
    let err = parse(&smtp_env(Some("STARTTLS-please")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("COURIER_SMTP_TLS"), "{err}");
}

#[test]
fn the_relays_message_size_limit_defaults_to_postfixs_and_is_checked() {
    let mut env = base();
    env.insert("COURIER_PROVIDERS", "smtp".into());
    env.insert("COURIER_SMTP_HOST", "relay.example".into());
    let (_, resources, _) = parse(&env).unwrap();
    assert_eq!(resources.smtp.unwrap().max_message_bytes, 10_240_000);
    env.insert("COURIER_SMTP_MAX_MESSAGE_BYTES", "52428800".into());
    let (_, resources, _) = parse(&env).unwrap();
    assert_eq!(resources.smtp.unwrap().max_message_bytes, 52_428_800);
    for bad in ["10", "lots", "200000000"] {
        env.insert("COURIER_SMTP_MAX_MESSAGE_BYTES", bad.into());
        let err = parse(&env).unwrap_err().to_string();
        assert!(err.contains("COURIER_SMTP_MAX_MESSAGE_BYTES"), "{err}");
    }
}

#[test]
fn allowed_senders_are_parsed_once_and_a_bad_entry_is_named() {
    let mut env = base();
    let (config, _, _) = parse(&env).unwrap();
    assert!(config.allowed_senders.is_none(), "unset: any sender");
    env.insert(
        "COURIER_ALLOWED_SENDERS",
        "shop@example.com, example.org".into(),
    );
    let (config, _, _) = parse(&env).unwrap();
    assert!(config.allowed_senders.unwrap().allows("x@example.org"));
    env.insert("COURIER_ALLOWED_SENDERS", "shop@example.com,,".into());
    let err = parse(&env).unwrap_err().to_string();
    assert!(err.contains("COURIER_ALLOWED_SENDERS"), "{err}");
}

#[test]
fn smtp_credentials_are_never_shown_nor_sent_in_clear() {
    let smtp_env = |tls: &str, user: Option<&str>, password: Option<&str>| {
        let mut env = base();
        env.insert("COURIER_PROVIDERS", "smtp".into());
        env.insert("COURIER_SMTP_HOST", "relay.example".into());
        env.insert("COURIER_SMTP_TLS", tls.into());
        if let Some(u) = user {
            env.insert("COURIER_SMTP_USERNAME", u.into());
        }
        if let Some(p) = password {
            env.insert("COURIER_SMTP_PASSWORD", p.into());
        }
        env
    };
    // Debug output of the settings never has the password.
    let (_, resources, _) = parse(&smtp_env(
        "starttls",
        Some("mailer"),
        Some("hunter2-secret"),
    ))
    .unwrap();
    let shown = format!("{resources:?}");
    assert!(!shown.contains("hunter2-secret"), "{shown}");
    assert!(
        shown.contains("<redacted>") && shown.contains("mailer"),
        "{shown}"
    );
    // Plaintext with credentials is refused, naming the variable.
    let err = parse(&smtp_env("none", Some("mailer"), Some("pw")))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("COURIER_SMTP_TLS") && err.contains("in clear"),
        "{err}"
    );
    assert!(!err.contains("pw\""), "{err}");
    // Plaintext without credentials stays allowed (local relays and the harness).
    assert!(parse(&smtp_env("none", None, None)).is_ok());
    // One credential without the other names the missing one.
    let err = parse(&smtp_env("tls", Some("mailer"), None))
        .unwrap_err()
        .to_string();
    assert!(err.contains("COURIER_SMTP_PASSWORD"), "{err}");
    let err = parse(&smtp_env("tls", None, Some("pw")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("COURIER_SMTP_USERNAME"), "{err}");
    // Credentials in a secret: one source only, never over plaintext.
    let secret = "arn:aws:secretsmanager:eu-west-1:1:secret:smtp";
    let mut env = smtp_env("starttls", None, None);
    env.insert("COURIER_SMTP_CREDENTIALS_SECRET", secret.into());
    let (_, resources, _) = parse(&env).unwrap();
    assert_eq!(
        resources.smtp.unwrap().credentials_secret.as_deref(),
        Some(secret)
    );
    let mut both = smtp_env("starttls", Some("mailer"), Some("pw"));
    both.insert("COURIER_SMTP_CREDENTIALS_SECRET", secret.into());
    let err = parse(&both).unwrap_err().to_string();
    assert!(
        err.contains("COURIER_SMTP_CREDENTIALS_SECRET") && err.contains("not both"),
        "{err}"
    );
    let mut plain = smtp_env("none", None, None);
    plain.insert("COURIER_SMTP_CREDENTIALS_SECRET", secret.into());
    let err = parse(&plain).unwrap_err().to_string();
    assert!(
        err.contains("COURIER_SMTP_TLS") && err.contains("in clear"),
        "{err}"
    );
}

#[test]
fn unsubscribe_links_need_an_https_url_and_a_key_secret() {
    // None set: no links.
    let (_, resources, _) = parse(&base()).unwrap();
    assert_eq!(resources.unsubscribe, None);
    // URL, mailto and secret: read, and written back by resource_env.
    let mut env = base();
    env.insert(
        "COURIER_UNSUBSCRIBE_URL",
        "https://abc.lambda-url.eu-west-1.on.aws/".into(),
    );
    env.insert(
        "COURIER_UNSUBSCRIBE_MAILTO",
        "unsubscribe@shop.example".into(),
    );
    env.insert("COURIER_UNSUBSCRIBE_KEY_SECRET", "unsub-key".into());
    let (_, resources, _) = parse(&env).unwrap();
    let u = resources.unsubscribe.clone().unwrap();
    assert_eq!(u.links.url, "https://abc.lambda-url.eu-west-1.on.aws/");
    assert_eq!(u.links.mailto.as_deref(), Some("unsubscribe@shop.example"));
    assert_eq!(u.key_secret, "unsub-key");
    let written: HashMap<&'static str, String> = resources.resource_env().into_iter().collect();
    assert_eq!(written, env);
    // Each error names its variable.
    let cases: [(&[(&'static str, &str)], &str); 5] = [
        (
            &[("COURIER_UNSUBSCRIBE_URL", "https://u.example/")],
            "COURIER_UNSUBSCRIBE_KEY_SECRET is required when COURIER_UNSUBSCRIBE_URL is set",
        ),
        (
            &[("COURIER_UNSUBSCRIBE_KEY_SECRET", "k")],
            "COURIER_UNSUBSCRIBE_URL is required when COURIER_UNSUBSCRIBE_KEY_SECRET is set",
        ),
        (
            &[("COURIER_UNSUBSCRIBE_MAILTO", "u@x.example")],
            "COURIER_UNSUBSCRIBE_URL is required when COURIER_UNSUBSCRIBE_MAILTO is set",
        ),
        (
            &[
                ("COURIER_UNSUBSCRIBE_URL", "http://u.example/"),
                ("COURIER_UNSUBSCRIBE_KEY_SECRET", "k"),
            ],
            "COURIER_UNSUBSCRIBE_URL=\"http://u.example/\" is invalid",
        ),
        (
            &[
                ("COURIER_UNSUBSCRIBE_URL", "https://u.example/"),
                ("COURIER_UNSUBSCRIBE_MAILTO", "Ann <a@x.example>"),
                ("COURIER_UNSUBSCRIBE_KEY_SECRET", "k"),
            ],
            "COURIER_UNSUBSCRIBE_MAILTO=\"Ann <a@x.example>\" is invalid",
        ),
    ];
    for (set, expected) in cases {
        let mut env = base();
        for (k, v) in set {
            env.insert(k, (*v).to_owned());
        }
        let error = parse(&env).unwrap_err().to_string();
        assert!(error.starts_with(expected), "{error}");
    }
}
