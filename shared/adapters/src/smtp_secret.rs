//! [`SecretSmtpMailer`]: the SMTP mailer with its credentials in a secret (Secrets Manager):
//! read when it is built (the function's INIT), and read again once when the relay refuses the
//! login (the secret was rotated), at most once a minute. The password is never logged nor put
//! in an error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use courier_core::ports::{Mailer, OutgoingEmail, Provider, Receipt, SecretStore, SendFailure};
use tracing::{info, warn};

use crate::smtp::{SmtpMailer, SmtpOptions};

/// The least time between two reads of the secret after refused logins.
pub const REREAD_AFTER: Duration = Duration::from_secs(60);

/// Why the mailer could not be built from its secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretSmtpError {
    #[error("SMTP credentials secret {id}: {source}")]
    Read {
        id: String,
        #[source]
        source: courier_core::ports::StoreError,
    },
    #[error("SMTP credentials secret {id}: {problem}")]
    Shape { id: String, problem: String },
    #[error(transparent)]
    Setup(#[from] crate::smtp::SmtpSetupError),
}

/// The username and password of a secret holding `{"username": "...", "password": "..."}`
/// (both non-empty strings); the error never quotes the secret.
pub fn credentials(text: &str) -> Result<(String, String), String> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|_| "is not a JSON object with username and password".to_owned())?;
    let field = |name: &str| {
        value
            .get(name)
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("has no non-empty string \"{name}\""))
    };
    Ok((field("username")?, field("password")?))
}

/// Whether a failure is the relay refusing the login (530, 534, 535: RFC 4954).
pub fn is_login_refused(failure: &SendFailure) -> bool {
    failure
        .verdict
        .raw_code
        .as_deref()
        .is_some_and(|code| ["530", "534", "535"].iter().any(|c| code.starts_with(c)))
}

/// An SMTP mailer whose credentials come from a secret.
pub struct SecretSmtpMailer {
    options: SmtpOptions,
    secret_id: String,
    secrets: Arc<dyn SecretStore>,
    current: std::sync::RwLock<Arc<dyn Mailer>>,
    /// When the secret was last read again after a refused login (`None`: never).
    last_reread: tokio::sync::Mutex<Option<Instant>>,
    build: fn(&SmtpOptions) -> Result<Arc<dyn Mailer>, crate::smtp::SmtpSetupError>,
}

fn smtp(options: &SmtpOptions) -> Result<Arc<dyn Mailer>, crate::smtp::SmtpSetupError> {
    Ok(Arc::new(SmtpMailer::new(options)?))
}

impl SecretSmtpMailer {
    /// Reads the secret and builds the mailer (`options.credentials` is replaced).
    pub async fn connect(
        options: SmtpOptions,
        secret_id: &str,
        secrets: Arc<dyn SecretStore>,
    ) -> Result<SecretSmtpMailer, SecretSmtpError> {
        Self::connect_with(options, secret_id, secrets, smtp).await
    }

    /// [`SecretSmtpMailer::connect`] with the mailer built by `build` (tests).
    pub async fn connect_with(
        options: SmtpOptions,
        secret_id: &str,
        secrets: Arc<dyn SecretStore>,
        build: fn(&SmtpOptions) -> Result<Arc<dyn Mailer>, crate::smtp::SmtpSetupError>,
    ) -> Result<SecretSmtpMailer, SecretSmtpError> {
        let options = Self::read(&options, secret_id, &*secrets).await?;
        let current = build(&options)?;
        Ok(SecretSmtpMailer {
            options,
            secret_id: secret_id.to_owned(),
            secrets,
            current: std::sync::RwLock::new(current),
            last_reread: tokio::sync::Mutex::new(None),
            build,
        })
    }

    async fn read(
        options: &SmtpOptions,
        id: &str,
        secrets: &dyn SecretStore,
    ) -> Result<SmtpOptions, SecretSmtpError> {
        let text = secrets
            .secret_string(id)
            .await
            .map_err(|source| SecretSmtpError::Read {
                id: id.to_owned(),
                source,
            })?;
        let (username, password) =
            credentials(&text).map_err(|problem| SecretSmtpError::Shape {
                id: id.to_owned(),
                problem,
            })?;
        Ok(SmtpOptions {
            credentials: Some((username, password)),
            ..options.clone()
        })
    }

    fn current(&self) -> Arc<dyn Mailer> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Reads the secret again unless a refused login made it do so within [`REREAD_AFTER`];
    /// whether a new mailer was built.
    async fn reread(&self) -> bool {
        let mut last = self.last_reread.lock().await;
        if last.is_some_and(|at| at.elapsed() < REREAD_AFTER) {
            return false;
        }
        *last = Some(Instant::now());
        match Self::read(&self.options, &self.secret_id, &*self.secrets).await {
            Ok(options) => match (self.build)(&options) {
                Ok(mailer) => {
                    *self.current.write().unwrap_or_else(|e| e.into_inner()) = mailer;
                    info!(secret = %self.secret_id, "SMTP login refused; credentials read again");
                    true
                }
                Err(e) => {
                    warn!(error = %e, "SMTP credentials read again, transport not rebuilt");
                    false
                }
            },
            Err(e) => {
                warn!(error = %e, "SMTP login refused; the secret could not be read again");
                false
            }
        }
    }
}

#[async_trait::async_trait]
impl Mailer for SecretSmtpMailer {
    fn provider(&self) -> Provider {
        Provider::Smtp
    }

    /// A refused login happens before the envelope: nothing was accepted, so the send is tried
    /// once more with the credentials read again.
    async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
        match self.current().send(email).await {
            Err(failure) if is_login_refused(&failure) && !failure.ambiguous => {
                if self.reread().await {
                    self.current().send(email).await
                } else {
                    Err(failure)
                }
            }
            outcome => outcome,
        }
    }
}

/// A secret store answering from a script (tests of the adapters that read secrets).
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod test_secrets {
    use std::sync::Arc;

    use courier_core::ports::{SecretStore, StoreError};

    /// Answers reads from a script (the last answer repeats), counting them.
    pub(crate) struct Script {
        answers: std::sync::Mutex<Vec<Result<String, String>>>,
        pub(crate) reads: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl SecretStore for Script {
        async fn secret_string(&self, _: &str) -> Result<String, StoreError> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut answers = self.answers.lock().unwrap();
            let answer = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0].clone()
            };
            answer.map_err(|e| StoreError::msg("GetSecretValue", e))
        }
    }

    pub(crate) fn script(answers: &[Result<&str, &str>]) -> Arc<Script> {
        Arc::new(Script {
            answers: std::sync::Mutex::new(
                answers
                    .iter()
                    .map(|a| a.map(str::to_owned).map_err(str::to_owned))
                    .collect(),
            ),
            reads: std::sync::atomic::AtomicUsize::new(0),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::test_secrets::script;
    use super::*;
    use courier_core::classify::classify_smtp;

    fn secret(password: &str) -> String {
        serde_json::json!({"username": "courier", "password": password}).to_string()
    }

    /// A relay that takes only the password "new".
    struct Relay {
        password: String,
    }

    #[async_trait::async_trait]
    impl Mailer for Relay {
        fn provider(&self) -> Provider {
            Provider::Smtp
        }
        async fn send(&self, email: &OutgoingEmail) -> Result<Receipt, SendFailure> {
            if self.password == "new" {
                return Ok(Receipt::new(email.message_id.clone()));
            }
            Err(SendFailure {
                verdict: classify_smtp("535 5.7.8 Authentication credentials invalid"),
                ambiguous: false,
                source: None,
            })
        }
    }

    fn relay(options: &SmtpOptions) -> Result<Arc<dyn Mailer>, crate::smtp::SmtpSetupError> {
        Ok(Arc::new(Relay {
            password: options.credentials.clone().unwrap_or_default().1,
        }))
    }

    fn options() -> SmtpOptions {
        SmtpOptions {
            host: "relay.example".into(),
            port: 587,
            security: crate::smtp::SmtpSecurity::StartTls,
            credentials: None,
            timeout: Duration::from_secs(5),
            pool_size: 1,
            max_message_bytes: crate::smtp::DEFAULT_MAX_MESSAGE_BYTES,
        }
    }

    fn email() -> OutgoingEmail {
        OutgoingEmail {
            message_id: "m1".into(),
            campaign_id: "c".into(),
            from: "shop@example.com".parse().unwrap(),
            to: vec!["ann@example.org".parse().unwrap()],
            cc: vec![],
            bcc: vec![],
            subject: "Hi".into(),
            text: Some("Hello".into()),
            html: None,
            headers: vec![],
            trace_id: None,
            attachments: Vec::new(),
        }
    }

    #[test]
    fn credentials_come_from_a_json_secret_and_errors_never_quote_it() {
        assert_eq!(
            credentials(&secret("s3cret")).unwrap(),
            ("courier".to_owned(), "s3cret".to_owned())
        );
        for bad in [
            "s3cret".to_owned(),
            r#"{"username": "courier"}"#.to_owned(),
            r#"{"username": "", "password": "s3cret"}"#.to_owned(),
            r#"{"username": "courier", "password": 7}"#.to_owned(),
        ] {
            let problem = credentials(&bad).unwrap_err();
            assert!(!problem.contains("s3cret"), "{problem}");
        }
    }

    #[tokio::test]
    async fn a_rotated_secret_is_read_again_once_when_the_login_is_refused() {
        let secrets = script(&[Ok(&secret("old")), Ok(&secret("new"))]);
        let mailer = SecretSmtpMailer::connect_with(options(), "arn:smtp", secrets.clone(), relay)
            .await
            .unwrap();
        // The login with the old password is refused; the secret is read again and the same
        // send goes through (nothing was accepted before the login).
        assert!(mailer.send(&email()).await.is_ok());
        assert!(mailer.send(&email()).await.is_ok());
        assert_eq!(secrets.reads.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_login_still_refused_is_not_read_again_within_a_minute() {
        let secrets = script(&[Ok(&secret("old"))]);
        let mailer = SecretSmtpMailer::connect_with(options(), "arn:smtp", secrets.clone(), relay)
            .await
            .unwrap();
        for _ in 0..3 {
            let failure = mailer.send(&email()).await.unwrap_err();
            assert!(is_login_refused(&failure));
        }
        assert_eq!(
            secrets.reads.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "INIT, then one read after the first refusal"
        );
    }

    #[tokio::test]
    async fn a_secret_that_cannot_be_read_or_used_fails_the_start_naming_it() {
        let unreadable = script(&[Err("AccessDeniedException")]);
        match SecretSmtpMailer::connect_with(options(), "arn:smtp", unreadable, relay).await {
            Err(SecretSmtpError::Read { id, .. }) => assert_eq!(id, "arn:smtp"),
            other => panic!("{:?}", other.err()),
        }
        let shapeless = script(&[Ok("hunter2")]);
        match SecretSmtpMailer::connect_with(options(), "arn:smtp", shapeless, relay).await {
            Err(e @ SecretSmtpError::Shape { .. }) => {
                assert!(!e.to_string().contains("hunter2"), "{e}")
            }
            other => panic!("{:?}", other.err()),
        }
    }
}
