//! The gate: only the stack's path's envelope is admitted, and through SNS only a notification
//! of the stack's topic whose signature verifies against a certificate on the trusted host.
//! Signed with a throwaway test key (`fixtures/sns/make.sh`).

use std::sync::atomic::{AtomicUsize, Ordering};

use courier_core::ports::{SigningCertificates, StoreError};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject as _;

use super::*;
use crate::sns::{self, SignatureVersion};

const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:courier-ses-events";
const HOST: &str = "sns.test.invalid";

fn sns_file(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/fixtures/sns/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn signed_fixture(version: u8) -> Value {
    serde_json::from_slice(&sns_file(&format!("signed-v{version}.json"))).unwrap()
}

fn trust() -> SnsTrust {
    SnsTrust {
        topic_arn: TOPIC.into(),
        certificate_host: HOST.into(),
    }
}

/// Re-signs a notification with the test key (version 2), as SNS would after a change.
fn resign(mut n: Value) -> Value {
    n["SignatureVersion"] = "2".into();
    n["Signature"] = "AA==".into();
    let text = sns::signed(&n, &trust()).unwrap().text;
    let key = PrivatePkcs8KeyDer::from_pem_slice(&sns_file("test-key.pem")).unwrap();
    let pair = ring::signature::RsaKeyPair::from_pkcs8(key.secret_pkcs8_der()).unwrap();
    let mut signature = vec![0; pair.public().modulus_len()];
    pair.sign(
        &ring::signature::RSA_PKCS1_SHA256,
        &ring::rand::SystemRandom::new(),
        text.as_bytes(),
        &mut signature,
    )
    .unwrap();
    n["Signature"] =
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, signature).into();
    n
}

fn verdict(n: &Value) -> Result<(), Forgery> {
    let signed = sns::signed(n, &trust())?;
    sns::verify(
        &signed,
        &sns::certificate_der(&sns_file("test-cert.pem")).unwrap(),
    )
}

/// Serves the test certificate for any URL and counts the fetches.
#[derive(Default)]
struct TestCertificates {
    fetches: AtomicUsize,
    failing: bool,
}

#[async_trait::async_trait]
impl SigningCertificates for TestCertificates {
    async fn certificate(&self, url: &str) -> Result<Vec<u8>, StoreError> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        if self.failing {
            return Err(StoreError::msg("fetch", format!("{url}: connection reset")));
        }
        Ok(sns_file("test-cert.pem"))
    }
}

fn gated(w: World, admission: Admission, certificates: Arc<TestCertificates>) -> World {
    World {
        applier: Applier {
            gate: Arc::new(Gate::new(admission, certificates)),
            ..w.applier
        },
        ..w
    }
}

#[test]
fn notifications_signed_under_both_versions_verify() {
    for version in [1, 2] {
        let n = signed_fixture(version);
        let signed = sns::signed(&n, &trust()).unwrap();
        let expected = if version == 1 {
            SignatureVersion::V1
        } else {
            SignatureVersion::V2
        };
        assert_eq!(signed.version, expected);
        assert_eq!(verdict(&n), Ok(()), "version {version}");
    }
    // A subject is signed when present (between MessageId and Timestamp).
    let mut n = signed_fixture(2);
    n["Subject"] = "Amazon SES Email Event Notification".into();
    let n = resign(n);
    assert_eq!(verdict(&n), Ok(()));
    let mut without = n.clone();
    without.as_object_mut().unwrap().remove("Subject");
    assert_eq!(verdict(&without), Err(Forgery::SignatureMismatch));
}

#[test]
fn a_change_to_any_signed_field_breaks_the_signature() {
    for version in [1, 2] {
        for (field, value) in [
            ("Message", r#"{"eventType":"Bounce"}"#),
            ("MessageId", "another-id"),
            ("Timestamp", "2026-11-30T11:00:00.000Z"),
        ] {
            let mut n = signed_fixture(version);
            n[field] = value.into();
            assert_eq!(
                verdict(&n),
                Err(Forgery::SignatureMismatch),
                "v{version} {field}"
            );
        }
        let mut n = signed_fixture(version);
        n["Subject"] = "added".into();
        assert_eq!(verdict(&n), Err(Forgery::SignatureMismatch));
        // One flipped bit of the signature.
        let mut n = signed_fixture(version);
        let mut signature = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            n["Signature"].as_str().unwrap(),
        )
        .unwrap();
        signature[10] ^= 1;
        n["Signature"] =
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, signature).into();
        assert_eq!(verdict(&n), Err(Forgery::SignatureMismatch));
        // The same version number, the other digest.
        let mut n = signed_fixture(version);
        n["SignatureVersion"] = if version == 1 { "2" } else { "1" }.into();
        assert_eq!(verdict(&n), Err(Forgery::SignatureMismatch));
    }
}

#[test]
fn a_signature_by_another_key_does_not_verify() {
    let signed = sns::signed(&signed_fixture(2), &trust()).unwrap();
    let other = sns::certificate_der(&sns_file("other-cert.pem")).unwrap();
    assert_eq!(
        sns::verify(&signed, &other),
        Err(Forgery::SignatureMismatch)
    );
    assert!(matches!(
        sns::certificate_der(
            b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"
        ),
        Err(Forgery::Certificate(_))
    ));
    assert!(matches!(
        sns::verify(&signed, b"not DER"),
        Err(Forgery::Certificate(_))
    ));
}

#[test]
fn the_envelope_topic_version_and_certificate_url_are_checked_before_any_fetch() {
    let with = |field: &str, value: &str| {
        let mut n = signed_fixture(2);
        n[field] = value.into();
        sns::signed(&n, &trust()).map(|_| ())
    };
    assert_eq!(
        with("Type", "SubscriptionConfirmation"),
        Err(Forgery::WrongEnvelope {
            expected: "an SNS notification"
        })
    );
    assert_eq!(
        with("TopicArn", "arn:aws:sns:eu-west-1:999999999999:attacker"),
        Err(Forgery::OtherTopic(
            "arn:aws:sns:eu-west-1:999999999999:attacker".into()
        ))
    );
    for url in [
        "http://sns.test.invalid/SimpleNotificationService-test.pem",
        "https://attacker.example/SimpleNotificationService-test.pem",
        "https://sns.test.invalid.attacker.example/cert.pem",
        "https://sns.test.invalid@attacker.example/cert.pem",
        "https://sns.test.invalid:8443/cert.pem",
        "https://sns.test.invalid/cert.txt",
        "https://sns.test.invalid/cert.pem?x=1",
        "https://sns.test.invalid",
        "sns.test.invalid/cert.pem",
    ] {
        assert_eq!(
            with("SigningCertURL", url),
            Err(Forgery::UntrustedCertificateUrl(url.into())),
            "{url}"
        );
    }
    assert_eq!(
        with("SigningCertURL", "https://SNS.test.invalid/x.pem"),
        Ok(()),
        "hosts compare without case"
    );
    assert_eq!(
        with("SignatureVersion", "3"),
        Err(Forgery::UnknownSignatureVersion("3".into()))
    );
    assert_eq!(with("Signature", "@@@"), Err(Forgery::SignatureEncoding));
    for field in [
        "Signature",
        "Message",
        "MessageId",
        "Timestamp",
        "SigningCertURL",
    ] {
        let mut n = signed_fixture(2);
        n.as_object_mut().unwrap().remove(field);
        assert!(
            matches!(sns::signed(&n, &trust()), Err(Forgery::MissingField(f)) if f == field),
            "{field}"
        );
    }
}

#[test]
fn the_sns_host_of_a_region() {
    assert_eq!(
        SnsTrust::default_host("eu-west-1"),
        "sns.eu-west-1.amazonaws.com"
    );
    assert_eq!(
        SnsTrust::default_host("cn-north-1"),
        "sns.cn-north-1.amazonaws.com.cn"
    );
}

#[tokio::test]
async fn a_signed_bounce_is_applied_and_forged_ones_change_nothing() {
    let certificates = Arc::new(TestCertificates::default());
    let w = gated(
        world(Some(Status::SentToProvider)),
        Admission::Sns(trust()),
        certificates.clone(),
    );
    let genuine = signed_fixture(1);
    let mut forged_message = genuine.clone();
    forged_message["Message"] = fixture("complaint").into();
    let mut other_topic = resign(genuine.clone());
    other_topic["TopicArn"] = "arn:aws:sns:eu-west-1:123456789012:other".into();
    let forged = [
        forged_message.to_string(),
        other_topic.to_string(),
        fixture("bounce-permanent"),
        fixture("eventbridge-delivery"),
        "not json".to_owned(),
    ];
    let report = w.applier.handle(sqs(&forged)).await;
    assert_eq!(report.refused.len(), 5, "{:?}", report.refused);
    assert!(report.failures.is_empty() && report.applied.is_empty());
    assert_eq!(w.status(), Some(Status::SentToProvider));
    assert!(w.suppression.entries.lock().unwrap().is_empty());
    assert_eq!(report.to_emf(0)["EventsRefused"], 5);

    let report = w.applier.handle(sqs(&[genuine.to_string()])).await;
    assert!(report.refused.is_empty() && report.failures.is_empty());
    assert_eq!(w.status(), Some(Status::BouncedPermanent));
    assert!(w.ann_suppressed());
    // One fetch per instance: the first forged message (same URL) fetched it, the rest reused it.
    w.applier
        .handle(sqs(&[signed_fixture(2).to_string()]))
        .await;
    assert_eq!(certificates.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_certificate_that_cannot_be_fetched_retries_the_message() {
    let certificates = Arc::new(TestCertificates {
        failing: true,
        ..TestCertificates::default()
    });
    let w = gated(
        world(Some(Status::SentToProvider)),
        Admission::Sns(trust()),
        certificates.clone(),
    );
    let report = w
        .applier
        .handle(sqs(&[signed_fixture(2).to_string()]))
        .await;
    assert_eq!(report.failures, vec!["sqs-0".to_owned()]);
    assert!(report.refused.is_empty());
    assert_eq!(w.status(), Some(Status::SentToProvider));
    // The function without an SNS path never fetches.
    let none = NoCertificates.certificate("https://x/y.pem").await;
    assert!(none.is_err());
}

#[tokio::test]
async fn the_eventbridge_path_admits_only_events_from_ses() {
    let w = gated(
        world(Some(Status::SentToProvider)),
        Admission::EventBridge,
        Arc::new(TestCertificates::default()),
    );
    let mut other_source: Value = serde_json::from_str(&fixture("eventbridge-delivery")).unwrap();
    other_source["source"] = "my.app".into();
    let report = w
        .applier
        .handle(sqs(&[
            fixture("delivery"),
            fixture("sns-delivery"),
            signed_fixture(2).to_string(),
            other_source.to_string(),
        ]))
        .await;
    assert_eq!(report.refused.len(), 4);
    assert_eq!(w.status(), Some(Status::SentToProvider));
    let report = w
        .applier
        .handle(sqs(&[fixture("eventbridge-delivery")]))
        .await;
    assert!(report.refused.is_empty());
    assert_eq!(w.status(), Some(Status::Delivered));
}
