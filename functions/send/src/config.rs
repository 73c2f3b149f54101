//! Configuration, parsed once at INIT from the environment (see
//! docs/configuration.md). `from_lookup` lets tests avoid the process environment.

use std::collections::BTreeMap;
use std::time::Duration;

use courier_adapters::smtp::SmtpSecurity;
use courier_core::breaker::BreakerConfig;
use courier_core::mailbox::AllowedSenders;
use courier_core::policy::{PolicyError, RetryPolicy, parse_duration, parse_duration_ms};
use courier_core::ports::Provider;
use courier_core::rate::RateLimit;

mod destinations;

/// The send function's settings.
#[derive(Debug, Clone)]
pub struct SendConfig {
    /// Records processed at once within a batch.
    pub concurrency: usize,
    /// Longest lease taken on a job.
    pub max_lease: Duration,
    /// The lease ends this long before the invocation's deadline.
    pub lease_margin: Duration,
    /// How long an ambiguous outcome waits for provider evidence before a resend.
    pub ambiguity_grace: Duration,
    /// How often a status write after a durable step (the provider's acceptance above all) is
    /// tried before the record is kept `unknown` or left to its lease
    /// (`COURIER_STATUS_WRITE_TRIES`, 1..=60; the waits between tries double from 50 ms to 1 s:
    /// the default 20 keeps trying for about 16 s, while the lease lasts).
    pub status_write_tries: u32,
    /// A provider's acceptance whose first status write has not answered within this is also
    /// queued as a copy carrying it (a hung write is as unsafe as a failed one).
    pub carrier_after: Duration,
    /// How long breaker state is cached per instance.
    pub breaker_cache: Duration,
    pub breaker: BreakerConfig,
    /// Send-rate limits by provider (`COURIER_SEND_RATE_SES`, `COURIER_SEND_RATE_SMTP`): all
    /// instances together call the provider at most this often (see `courier_core::rate`).
    pub rate_limits: BTreeMap<String, RateLimit>,
    /// SES without a configured rate (`COURIER_SEND_RATE_SES` unset or empty): paced by the
    /// account's quota, read from SES, with this horizon and chunk. `off` or `0` turns pacing off.
    pub ses_quota_pacing: Option<RateLimit>,
    /// Per-destination pacing (`COURIER_DESTINATION_PACING`, `COURIER_DESTINATION_RATE_*`);
    /// `None`: receiving domains are not paced.
    pub destination_pacing: Option<courier_core::pacing::DestinationPacing>,
    /// The horizon and chunk every send rate gets (`COURIER_SEND_RATE_MAX_AHEAD`,
    /// `COURIER_SEND_RATE_CHUNK`; the rate itself is 1/s here), live settings' rates included.
    pub rate_shape: RateLimit,
    /// The retry lane (`COURIER_RETRY_HORIZON`, 1 s by default; `off`: no lane): retries book
    /// a paced provider's schedule only while it is booked less than this far ahead.
    pub retry_horizon: Option<Duration>,
    /// How long the live settings are used before they are read again
    /// (`COURIER_LIVE_SETTINGS_CACHE`, 1 s..=1 h).
    pub live_settings_cache: Duration,
    /// The identities jobs may send as (`COURIER_ALLOWED_SENDERS`); `None`: any (SES still
    /// sends only from verified identities).
    pub allowed_senders: Option<AllowedSenders>,
    /// Which templates each sender may use (`COURIER_SENDER_TEMPLATES`); `None`: any.
    pub sender_templates: Option<courier_core::senders::SenderTemplates>,
    /// How long the S3 archive keeps dead letters (`COURIER_ARCHIVE_RETENTION_DAYS`, 1..=3653):
    /// the letter index entries this function writes outlive it by a margin, then expire.
    pub archive_retention_days: i64,
}

impl Default for SendConfig {
    fn default() -> Self {
        SendConfig {
            concurrency: 10,
            max_lease: crate::DEFAULT_MAX_LEASE,
            lease_margin: Duration::from_secs(5),
            ambiguity_grace: Duration::from_secs(900),
            status_write_tries: 20,
            carrier_after: Duration::from_millis(500),
            breaker_cache: Duration::from_secs(2),
            breaker: BreakerConfig::default(),
            rate_limits: BTreeMap::new(),
            ses_quota_pacing: None,
            destination_pacing: Some(courier_core::pacing::DestinationPacing::default()),
            rate_shape: RateLimit {
                per_sec: 1.0,
                max_ahead: RateLimit::DEFAULT_MAX_AHEAD,
                chunk: RateLimit::DEFAULT_CHUNK,
            },
            live_settings_cache: Duration::from_secs(30),
            retry_horizon: Some(RateLimit::DEFAULT_RETRY_HORIZON),
            allowed_senders: None,
            sender_templates: None,
            archive_retention_days: courier_adapters::aws::letters::DEFAULT_ARCHIVE_RETENTION_DAYS,
        }
    }
}

/// `COURIER_RETRY_HORIZON`: a duration above 0 and below `max_ahead` (the fresh mail's
/// horizon), or `off`; unset, [`RateLimit::DEFAULT_RETRY_HORIZON`] (no lane when `max_ahead`
/// leaves fresh mail no room beyond it).
fn retry_horizon(
    lookup: &impl Fn(&str) -> Option<String>,
    max_ahead: Duration,
) -> Result<Option<Duration>, ConfigError> {
    let name = "COURIER_RETRY_HORIZON";
    match lookup(name).as_deref().map(str::trim) {
        None | Some("") => Ok(Some(RateLimit::DEFAULT_RETRY_HORIZON).filter(|&h| h < max_ahead)),
        Some("off") => Ok(None),
        Some(v) => {
            let invalid = |problem: String| ConfigError::Invalid {
                name,
                value: v.to_owned(),
                problem,
            };
            let horizon = parse_duration_ms(v).map_err(invalid)?;
            if horizon.is_zero() || horizon >= max_ahead {
                return Err(invalid(format!(
                    "must be above 0 (e.g. 200ms) and below COURIER_SEND_RATE_MAX_AHEAD ({max_ahead:?}), or off"
                )));
            }
            Ok(Some(horizon))
        }
    }
}

/// A setting that cannot be used, naming the variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is required")]
    Missing { name: &'static str },
    #[error("{name} is required when {given} is set")]
    MissingWith {
        name: &'static str,
        given: &'static str,
    },
    #[error("{name}={value:?} is invalid: {problem}")]
    Invalid {
        name: &'static str,
        value: String,
        problem: String,
    },
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// Names of the resources the function talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    pub queue_url: String,
    /// `COURIER_RETRY_QUEUE_URL`: the retry queue, where every copy that waits goes (its own
    /// event source and `MaximumConcurrency`: the retry lane's concurrency); unset, the send
    /// queue.
    pub retry_queue_url: Option<String>,
    pub dead_letter_queue_url: String,
    /// The dead-letter index (DynamoDB), written with every dead letter.
    pub letter_index_table: String,
    pub status_table: String,
    pub suppression_table: String,
    pub control_table: String,
    pub template_bucket: String,
    /// Where copies and letters too large for an SQS message are stored (the claim check).
    pub payload_bucket: String,
    pub delay_state_machine_arn: String,
    /// Providers in failover order.
    pub providers: Vec<Provider>,
    pub ses_configuration_set: Option<String>,
    pub smtp: Option<SmtpSettings>,
    /// `COURIER_ENVELOPE_KEY_SECRET`: the secret (ARN or name) holding the retry envelopes'
    /// seal keys (`{"key": "...", "previous": [...]}`, [`courier_core::seal`]).
    pub envelope_key_secret: String,
    /// `COURIER_OUTCOME_BUS`: the event bus for outcome events; none: not published.
    pub outcome_bus: Option<String>,
    /// One-click unsubscribe links; none: no links are added.
    pub unsubscribe: Option<UnsubscribeSettings>,
}

/// `COURIER_UNSUBSCRIBE_URL` (the unsubscribe function's HTTPS URL), `COURIER_UNSUBSCRIBE_MAILTO`
/// (optional) and `COURIER_UNSUBSCRIBE_KEY_SECRET` (the secret, ARN or name, holding the
/// token keys `{"key": "...", "previous": [...]}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubscribeSettings {
    pub links: courier_core::unsubscribe::Links,
    pub key_secret: String,
}

fn unsubscribe_settings(
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Option<UnsubscribeSettings>, ConfigError> {
    let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let Some(url) = set("COURIER_UNSUBSCRIBE_URL") else {
        for name in [
            "COURIER_UNSUBSCRIBE_MAILTO",
            "COURIER_UNSUBSCRIBE_KEY_SECRET",
        ] {
            if set(name).is_some() {
                return Err(missing("COURIER_UNSUBSCRIBE_URL", name));
            }
        }
        return Ok(None);
    };
    let mailto = set("COURIER_UNSUBSCRIBE_MAILTO");
    let links = courier_core::unsubscribe::Links::new(&url, mailto.as_deref()).map_err(|e| {
        let (name, value) = match &e {
            courier_core::unsubscribe::LinksError::Url(_) => {
                ("COURIER_UNSUBSCRIBE_URL", url.clone())
            }
            courier_core::unsubscribe::LinksError::Mailto(_) => (
                "COURIER_UNSUBSCRIBE_MAILTO",
                mailto.clone().unwrap_or_default(),
            ),
        };
        ConfigError::Invalid {
            name,
            value,
            problem: e.to_string(),
        }
    })?;
    let key_secret = set("COURIER_UNSUBSCRIBE_KEY_SECRET")
        .ok_or_else(|| missing("COURIER_UNSUBSCRIBE_KEY_SECRET", "COURIER_UNSUBSCRIBE_URL"))?;
    Ok(Some(UnsubscribeSettings { links, key_secret }))
}

impl Resources {
    /// Where copies that wait are put back: the retry queue, or the send queue without one.
    pub fn requeue_url(&self) -> &str {
        self.retry_queue_url.as_deref().unwrap_or(&self.queue_url)
    }

    /// The settings naming the queues, tables, bucket and state machine (the required
    /// `COURIER_*` variables [`SendConfig::from_lookup`] reads), for a process to be started on
    /// these resources.
    pub fn resource_env(&self) -> Vec<(&'static str, String)> {
        let bus = self.outcome_bus.clone().map(|b| ("COURIER_OUTCOME_BUS", b));
        let mut env = vec![
            ("COURIER_QUEUE_URL", self.queue_url.clone()),
            (
                "COURIER_DEAD_LETTER_QUEUE_URL",
                self.dead_letter_queue_url.clone(),
            ),
            (
                "COURIER_LETTER_INDEX_TABLE",
                self.letter_index_table.clone(),
            ),
            ("COURIER_STATUS_TABLE", self.status_table.clone()),
            ("COURIER_SUPPRESSION_TABLE", self.suppression_table.clone()),
            ("COURIER_CONTROL_TABLE", self.control_table.clone()),
            ("COURIER_TEMPLATE_BUCKET", self.template_bucket.clone()),
            ("COURIER_PAYLOAD_BUCKET", self.payload_bucket.clone()),
            (
                "COURIER_DELAY_STATE_MACHINE_ARN",
                self.delay_state_machine_arn.clone(),
            ),
            (
                "COURIER_ENVELOPE_KEY_SECRET",
                self.envelope_key_secret.clone(),
            ),
        ];
        env.extend(bus);
        if let Some(url) = &self.retry_queue_url {
            env.push(("COURIER_RETRY_QUEUE_URL", url.clone()));
        }
        if let Some(u) = &self.unsubscribe {
            env.push(("COURIER_UNSUBSCRIBE_URL", u.links.url.clone()));
            env.push(("COURIER_UNSUBSCRIBE_KEY_SECRET", u.key_secret.clone()));
            if let Some(mailto) = &u.links.mailto {
                env.push(("COURIER_UNSUBSCRIBE_MAILTO", mailto.clone()));
            }
        }
        env
    }
}

/// SMTP relay settings. `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SmtpSettings {
    pub host: String,
    pub port: u16,
    /// `COURIER_SMTP_TLS`: `none`, `starttls` (required) or `tls` (implicit).
    pub tls: SmtpSecurity,
    pub username: Option<String>,
    pub password: Option<String>,
    /// `COURIER_SMTP_CREDENTIALS_SECRET`: a Secrets Manager secret (ARN or name) holding
    /// `{"username": ..., "password": ...}`, read at INIT and again when a login is refused
    /// (instead of `COURIER_SMTP_USERNAME`/`COURIER_SMTP_PASSWORD`).
    pub credentials_secret: Option<String>,
    pub timeout: Duration,
    /// `COURIER_SMTP_MAX_MESSAGE_BYTES`: the relay's message size limit (default 10,240,000,
    /// Postfix's); a message with attachments above it is dead-lettered, not sent.
    pub max_message_bytes: usize,
}

/// One SMTP credential without the other.
fn missing(name: &'static str, given: &'static str) -> ConfigError {
    ConfigError::MissingWith { name, given }
}

impl std::fmt::Debug for SmtpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("credentials_secret", &self.credentials_secret)
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn duration(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match lookup(name) {
        None => Ok(default),
        Some(v) => parse_duration(&v)
            .map(Duration::from_secs)
            .map_err(|problem| ConfigError::Invalid {
                name,
                value: v,
                problem,
            }),
    }
}

fn required(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &'static str,
) -> Result<String, ConfigError> {
    lookup(name)
        .filter(|v| !v.is_empty())
        .ok_or(ConfigError::Missing { name })
}

/// `COURIER_PROVIDERS`: providers in failover order (default `ses`), each named once.
fn parse_providers(value: Option<String>) -> Result<Vec<Provider>, ConfigError> {
    let value = value.unwrap_or_else(|| "ses".into());
    let invalid = || ConfigError::Invalid {
        name: "COURIER_PROVIDERS",
        value: value.clone(),
        problem: "a comma-separated list of ses and smtp, each at most once".into(),
    };
    let mut providers = Vec::new();
    for name in value.split(',').map(|p| p.trim().to_lowercase()) {
        if name.is_empty() {
            continue;
        }
        match Provider::parse(&name) {
            Some(p) if !providers.contains(&p) => providers.push(p),
            _ => return Err(invalid()),
        }
    }
    if providers.is_empty() {
        return Err(invalid());
    }
    Ok(providers)
}

/// The send-rate limits of the configured providers, and SES's pacing by its quota when no rate
/// is configured for it.
#[allow(clippy::type_complexity)]
fn rate_limits(
    lookup: &impl Fn(&str) -> Option<String>,
    providers: &[Provider],
) -> Result<(BTreeMap<String, RateLimit>, Option<RateLimit>, RateLimit), ConfigError> {
    let max_ahead = match lookup("COURIER_SEND_RATE_MAX_AHEAD") {
        None => RateLimit::DEFAULT_MAX_AHEAD,
        Some(v) => parse_duration_ms(&v).map_err(|problem| ConfigError::Invalid {
            name: "COURIER_SEND_RATE_MAX_AHEAD",
            value: v.clone(),
            problem,
        })?,
    };
    let chunk = match lookup("COURIER_SEND_RATE_CHUNK") {
        None => RateLimit::DEFAULT_CHUNK,
        Some(v) => v.parse().map_err(|_| ConfigError::Invalid {
            name: "COURIER_SEND_RATE_CHUNK",
            value: v.clone(),
            problem: "must be a whole number of slots".into(),
        })?,
    };
    // Checked even when no rate uses it: a live settings document's rates take this shape.
    let shape = RateLimit {
        per_sec: 1.0,
        max_ahead,
        chunk,
    }
    .validated()
    .map_err(|e| {
        let name = match e {
            courier_core::rate::RateLimitError::Chunk(_) => "COURIER_SEND_RATE_CHUNK",
            _ => "COURIER_SEND_RATE_MAX_AHEAD",
        };
        ConfigError::Invalid {
            name,
            value: lookup(name).unwrap_or_default(),
            problem: e.to_string(),
        }
    })?;
    let mut limits = BTreeMap::new();
    let mut quota_pacing = None;
    for (provider, name) in [
        (Provider::Ses, "COURIER_SEND_RATE_SES"),
        (Provider::Smtp, "COURIER_SEND_RATE_SMTP"),
    ] {
        let configured = lookup(name).filter(|v| !v.trim().is_empty());
        let Some(v) = configured else {
            if provider == Provider::Ses && providers.contains(&provider) {
                quota_pacing = Some(shape);
            }
            continue;
        };
        if matches!(v.trim(), "off" | "0") {
            continue;
        }
        let per_sec: f64 = v.trim().parse().map_err(|_| ConfigError::Invalid {
            name,
            value: v.clone(),
            problem: "must be a number of calls per second".into(),
        })?;
        // The shape is valid (above): only the rate can be wrong here.
        let limit =
            RateLimit { per_sec, ..shape }
                .validated()
                .map_err(|e| ConfigError::Invalid {
                    name,
                    value: v.clone(),
                    problem: e.to_string(),
                })?;
        if providers.contains(&provider) {
            limits.insert(provider.as_str().to_owned(), limit);
        }
    }
    Ok((limits, quota_pacing, shape))
}

impl SendConfig {
    pub fn from_lookup(
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(SendConfig, Resources, RetryPolicy), ConfigError> {
        let mut config = SendConfig::default();
        if let Some(v) = lookup("COURIER_CONCURRENCY") {
            config.concurrency = v
                .parse()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| ConfigError::Invalid {
                    name: "COURIER_CONCURRENCY",
                    value: v.clone(),
                    problem: "must be a whole number in 1..=100".into(),
                })?;
        }
        if let Some(v) = lookup("COURIER_ALLOWED_SENDERS").filter(|v| !v.trim().is_empty()) {
            config.allowed_senders =
                Some(
                    AllowedSenders::parse(&v).map_err(|problem| ConfigError::Invalid {
                        name: "COURIER_ALLOWED_SENDERS",
                        value: v.clone(),
                        problem,
                    })?,
                );
        }
        if let Some(v) = lookup("COURIER_SENDER_TEMPLATES").filter(|v| !v.trim().is_empty()) {
            config.sender_templates = Some(
                courier_core::senders::SenderTemplates::parse(&v).map_err(|problem| {
                    ConfigError::Invalid {
                        name: "COURIER_SENDER_TEMPLATES",
                        value: v.clone(),
                        problem,
                    }
                })?,
            );
        }
        if let Some(v) = lookup("COURIER_ARCHIVE_RETENTION_DAYS").filter(|v| !v.is_empty()) {
            config.archive_retention_days =
                courier_adapters::aws::letters::parse_archive_retention_days(&v).map_err(
                    |problem| ConfigError::Invalid {
                        name: "COURIER_ARCHIVE_RETENTION_DAYS",
                        value: v.clone(),
                        problem,
                    },
                )?;
        }
        if let Some(v) = lookup("COURIER_STATUS_WRITE_TRIES") {
            config.status_write_tries = v
                .parse()
                .ok()
                .filter(|n| (1..=60).contains(n))
                .ok_or_else(|| ConfigError::Invalid {
                    name: "COURIER_STATUS_WRITE_TRIES",
                    value: v.clone(),
                    problem: "must be a whole number in 1..=60".into(),
                })?;
        }
        config.max_lease = duration(&lookup, "COURIER_MAX_LEASE", config.max_lease)?;
        config.lease_margin = duration(&lookup, "COURIER_LEASE_MARGIN", config.lease_margin)?;
        config.ambiguity_grace =
            duration(&lookup, "COURIER_AMBIGUITY_GRACE", config.ambiguity_grace)?;
        config.breaker_cache = duration(&lookup, "COURIER_BREAKER_CACHE", config.breaker_cache)?;
        let providers = parse_providers(lookup("COURIER_PROVIDERS"))?;
        let smtp = if providers.contains(&Provider::Smtp) {
            let port_text = lookup("COURIER_SMTP_PORT").unwrap_or_else(|| "587".into());
            let port = port_text.parse().map_err(|_| ConfigError::Invalid {
                name: "COURIER_SMTP_PORT",
                value: port_text.clone(),
                problem: "must be a port number".into(),
            })?;
            let tls = match lookup("COURIER_SMTP_TLS").as_deref() {
                None | Some("starttls") => SmtpSecurity::StartTls,
                Some("tls") => SmtpSecurity::Tls,
                Some("none") => SmtpSecurity::None,
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "COURIER_SMTP_TLS",
                        value: other.to_owned(),
                        problem: "one of none, starttls, tls".into(),
                    });
                }
            };
            let username = lookup("COURIER_SMTP_USERNAME").filter(|v| !v.is_empty());
            let password = lookup("COURIER_SMTP_PASSWORD").filter(|v| !v.is_empty());
            let credentials_secret =
                lookup("COURIER_SMTP_CREDENTIALS_SECRET").filter(|v| !v.trim().is_empty());
            if let Some(secret) = &credentials_secret {
                if username.is_some() || password.is_some() {
                    return Err(ConfigError::Invalid {
                        name: "COURIER_SMTP_CREDENTIALS_SECRET",
                        value: secret.clone(),
                        problem: "set either the secret or COURIER_SMTP_USERNAME and COURIER_SMTP_PASSWORD, not both".into(),
                    });
                }
                if tls == SmtpSecurity::None {
                    return Err(ConfigError::Invalid {
                        name: "COURIER_SMTP_TLS",
                        value: "none".into(),
                        problem: "plaintext SMTP would send the credentials of COURIER_SMTP_CREDENTIALS_SECRET in clear; use starttls or tls".into(),
                    });
                }
            }
            match (&username, &password) {
                (Some(_), None) => {
                    return Err(missing("COURIER_SMTP_PASSWORD", "COURIER_SMTP_USERNAME"));
                }
                (None, Some(_)) => {
                    return Err(missing("COURIER_SMTP_USERNAME", "COURIER_SMTP_PASSWORD"));
                }
                (Some(_), Some(_)) if tls == SmtpSecurity::None => {
                    return Err(ConfigError::Invalid {
                        name: "COURIER_SMTP_TLS",
                        value: "none".into(),
                        problem: "plaintext SMTP would send COURIER_SMTP_PASSWORD in clear; use starttls or tls with credentials".into(),
                    });
                }
                _ => {}
            }
            Some(SmtpSettings {
                host: required(&lookup, "COURIER_SMTP_HOST")?,
                port,
                tls,
                username,
                password,
                credentials_secret,
                timeout: duration(&lookup, "COURIER_SMTP_TIMEOUT", Duration::from_secs(30))?,
                max_message_bytes: match lookup("COURIER_SMTP_MAX_MESSAGE_BYTES") {
                    None => courier_adapters::smtp::DEFAULT_MAX_MESSAGE_BYTES,
                    Some(v) => v
                        .parse()
                        .ok()
                        .filter(|n| (1024..=100_000_000).contains(n))
                        .ok_or_else(|| ConfigError::Invalid {
                            name: "COURIER_SMTP_MAX_MESSAGE_BYTES",
                            value: v.clone(),
                            problem: "must be a whole number of bytes in 1024..=100000000".into(),
                        })?,
                },
            })
        } else {
            None
        };
        let resources = Resources {
            queue_url: required(&lookup, "COURIER_QUEUE_URL")?,
            retry_queue_url: lookup("COURIER_RETRY_QUEUE_URL").filter(|v| !v.is_empty()),
            dead_letter_queue_url: required(&lookup, "COURIER_DEAD_LETTER_QUEUE_URL")?,
            letter_index_table: required(&lookup, "COURIER_LETTER_INDEX_TABLE")?,
            status_table: required(&lookup, "COURIER_STATUS_TABLE")?,
            suppression_table: required(&lookup, "COURIER_SUPPRESSION_TABLE")?,
            control_table: required(&lookup, "COURIER_CONTROL_TABLE")?,
            template_bucket: required(&lookup, "COURIER_TEMPLATE_BUCKET")?,
            payload_bucket: required(&lookup, "COURIER_PAYLOAD_BUCKET")?,
            delay_state_machine_arn: required(&lookup, "COURIER_DELAY_STATE_MACHINE_ARN")?,
            providers,
            ses_configuration_set: lookup("COURIER_SES_CONFIGURATION_SET"),
            smtp,
            envelope_key_secret: required(&lookup, "COURIER_ENVELOPE_KEY_SECRET")?,
            outcome_bus: lookup("COURIER_OUTCOME_BUS").filter(|v| !v.is_empty()),
            unsubscribe: unsubscribe_settings(&lookup)?,
        };
        (
            config.rate_limits,
            config.ses_quota_pacing,
            config.rate_shape,
        ) = rate_limits(&lookup, &resources.providers)?;
        config.live_settings_cache = duration(
            &lookup,
            "COURIER_LIVE_SETTINGS_CACHE",
            config.live_settings_cache,
        )?;
        if !(Duration::from_secs(1)..=Duration::from_secs(3600))
            .contains(&config.live_settings_cache)
        {
            return Err(ConfigError::Invalid {
                name: "COURIER_LIVE_SETTINGS_CACHE",
                value: lookup("COURIER_LIVE_SETTINGS_CACHE").unwrap_or_default(),
                problem: "must be between 1s and 1h".into(),
            });
        }
        config.destination_pacing = destinations::destination_pacing(&lookup)?;
        config.retry_horizon = retry_horizon(&lookup, config.rate_shape.max_ahead)?;
        let policy = RetryPolicy::from_lookup(&lookup)?;
        Ok((config, resources, policy))
    }
}

#[cfg(test)]
mod tests;
