//! Which messages the events function admits: only the envelope of the path SES publishes
//! through, and through SNS only a notification from the stack's topic whose signature verifies
//! (AWS, "Verifying the signatures of Amazon SNS messages": versions 1, SHA1withRSA, and 2,
//! SHA256withRSA, over the notification's fields; the certificate from an HTTPS URL on the SNS
//! host of the stack's region, fetched once per instance).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use courier_core::ports::{SigningCertificates, StoreError};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{
    AlgorithmIdentifier, CertificateDer, InvalidSignature, SignatureVerificationAlgorithm, alg_id,
};
use serde_json::Value;

/// The envelope the events function admits (`COURIER_SES_EVENTS_VIA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// SES -> SNS -> SQS: signed notifications of one topic only.
    Sns(SnsTrust),
    /// SES -> EventBridge -> SQS: `aws.ses` events only (the queue policy admits only the rule).
    EventBridge,
    /// Any envelope, unverified: local tools and tests only (no variable selects it).
    Any,
}

/// What a notification must show to be admitted through SNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnsTrust {
    /// The stack's SES events topic (`COURIER_SES_EVENTS_TOPIC_ARN`).
    pub topic_arn: String,
    /// The only host certificates are fetched from (`COURIER_SNS_CERTIFICATE_HOST`, default
    /// `sns.<region>.amazonaws.com`).
    pub certificate_host: String,
}

impl SnsTrust {
    /// The SNS host of a region (`amazonaws.com.cn` in the China regions).
    pub fn default_host(region: &str) -> String {
        let suffix = if region.starts_with("cn-") {
            "amazonaws.com.cn"
        } else {
            "amazonaws.com"
        };
        format!("sns.{region}.{suffix}")
    }
}

/// Why a message was refused: it is not what the stack's SES publishing path delivers. Each is
/// counted (`EventsRefused`), logged and acknowledged; none is applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Forgery {
    #[error("not JSON")]
    NotJson,
    #[error("expected {expected}, got another envelope")]
    WrongEnvelope { expected: &'static str },
    #[error("SNS notification without {0}")]
    MissingField(&'static str),
    #[error("SNS notification from another topic ({0})")]
    OtherTopic(String),
    #[error("signing certificate URL not on the trusted SNS host: {0}")]
    UntrustedCertificateUrl(String),
    #[error("unknown SNS signature version {0:?} (1 and 2 are known)")]
    UnknownSignatureVersion(String),
    #[error("SNS signature is not base64")]
    SignatureEncoding,
    #[error("signing certificate unusable: {0}")]
    Certificate(String),
    #[error("SNS signature does not verify")]
    SignatureMismatch,
}

/// A refused message, or one that could not be checked yet.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("refused: {0}")]
    Forged(#[from] Forgery),
    /// The certificate could not be fetched: the message is retried, not refused.
    #[error("signature not checked yet: {0}")]
    Unchecked(#[source] StoreError),
}

/// SNS signature versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureVersion {
    /// SHA1withRSA.
    V1,
    /// SHA256withRSA.
    V2,
}

/// A notification's signature and what it signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub certificate_url: String,
    pub version: SignatureVersion,
    pub signature: Vec<u8>,
    /// AWS's string to sign: each field as "Name\nvalue\n", in this order.
    pub text: String,
}

fn field<'a>(outer: &'a Value, name: &'static str) -> Result<&'a str, Forgery> {
    outer
        .get(name)
        .and_then(Value::as_str)
        .ok_or(Forgery::MissingField(name))
}

/// The signed parts of an SNS notification from the trusted topic, with a certificate URL on
/// the trusted host.
pub fn signed(outer: &Value, trust: &SnsTrust) -> Result<Signed, Forgery> {
    if outer.get("Type").and_then(Value::as_str) != Some("Notification") {
        return Err(Forgery::WrongEnvelope {
            expected: "an SNS notification",
        });
    }
    let topic = field(outer, "TopicArn")?;
    if topic != trust.topic_arn {
        return Err(Forgery::OtherTopic(topic.to_owned()));
    }
    let certificate_url = field(outer, "SigningCertURL")?;
    if certificate_host(certificate_url)
        .is_none_or(|host| !host.eq_ignore_ascii_case(&trust.certificate_host))
    {
        return Err(Forgery::UntrustedCertificateUrl(certificate_url.to_owned()));
    }
    let version = match field(outer, "SignatureVersion")? {
        "1" => SignatureVersion::V1,
        "2" => SignatureVersion::V2,
        other => return Err(Forgery::UnknownSignatureVersion(other.to_owned())),
    };
    let signature = base64::engine::general_purpose::STANDARD
        .decode(field(outer, "Signature")?)
        .map_err(|_| Forgery::SignatureEncoding)?;
    let mut text = String::new();
    for name in [
        "Message",
        "MessageId",
        "Subject",
        "Timestamp",
        "TopicArn",
        "Type",
    ] {
        match (name, outer.get(name).and_then(Value::as_str)) {
            ("Subject", None) => {}
            (name, None) => return Err(Forgery::MissingField(name)),
            (name, Some(value)) => {
                text.push_str(name);
                text.push('\n');
                text.push_str(value);
                text.push('\n');
            }
        }
    }
    Ok(Signed {
        certificate_url: certificate_url.to_owned(),
        version,
        signature,
        text,
    })
}

/// The host of an `https://host/....pem` URL without user, port, query or fragment.
fn certificate_host(url: &str) -> Option<&str> {
    let (host, path) = url.strip_prefix("https://")?.split_once('/')?;
    let plain = !host.is_empty()
        && !host.contains(['@', ':'])
        && path.ends_with(".pem")
        && !path.contains(['?', '#', '\\']);
    plain.then_some(host)
}

/// The DER of the first certificate in a PEM text.
pub fn certificate_der(pem: &[u8]) -> Result<Vec<u8>, Forgery> {
    CertificateDer::from_pem_slice(pem)
        .map(|c| c.as_ref().to_vec())
        .map_err(|e| Forgery::Certificate(e.to_string()))
}

/// Checks the signature against the certificate's RSA key.
pub fn verify(signed: &Signed, certificate_der: &[u8]) -> Result<(), Forgery> {
    let der = CertificateDer::from(certificate_der);
    let certificate =
        webpki::EndEntityCert::try_from(&der).map_err(|e| Forgery::Certificate(e.to_string()))?;
    let algorithm: &dyn SignatureVerificationAlgorithm = match signed.version {
        SignatureVersion::V1 => &RsaPkcs1Sha1,
        SignatureVersion::V2 => webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    };
    certificate
        .verify_signature(algorithm, signed.text.as_bytes(), &signed.signature)
        .map_err(|_| Forgery::SignatureMismatch)
}

/// SHA1withRSA (PKCS #1 v1.5), which SNS signature version 1 uses and webpki does not offer.
#[derive(Debug)]
struct RsaPkcs1Sha1;

/// `sha1WithRSAEncryption` (1.2.840.113549.1.1.5) with NULL parameters, without the outer
/// SEQUENCE (the form `alg_id` uses).
const SHA1_WITH_RSA: &[u8] = &[
    0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05, 0x05, 0x00,
];

impl SignatureVerificationAlgorithm for RsaPkcs1Sha1 {
    fn verify_signature(
        &self,
        public_key: &[u8],
        message: &[u8],
        signature: &[u8],
    ) -> Result<(), InvalidSignature> {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            public_key,
        )
        .verify(message, signature)
        .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::RSA_ENCRYPTION
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        AlgorithmIdentifier::from_slice(SHA1_WITH_RSA)
    }
}

/// How many certificates an instance keeps (SNS signs with one per region at a time; a few
/// more cover a rotation).
const KEPT_CERTIFICATES: usize = 8;

/// Admits or refuses each message before it is parsed; keeps the certificates it fetched.
pub struct Gate {
    pub admission: Admission,
    certificates: Arc<dyn SigningCertificates>,
    kept: Mutex<HashMap<String, Arc<Vec<u8>>>>,
}

impl Gate {
    pub fn new(admission: Admission, certificates: Arc<dyn SigningCertificates>) -> Gate {
        Gate {
            admission,
            certificates,
            kept: Mutex::default(),
        }
    }

    /// Admits a message as JSON, or says why not.
    pub async fn admit(&self, body: &str) -> Result<Value, Refusal> {
        let outer: Value = serde_json::from_str(body).map_err(|_| Forgery::NotJson)?;
        match &self.admission {
            Admission::Any => {}
            Admission::EventBridge => {
                let from_ses = outer.get("detail-type").is_some()
                    && outer.get("source").and_then(Value::as_str) == Some("aws.ses");
                if !from_ses {
                    return Err(Forgery::WrongEnvelope {
                        expected: "an EventBridge event from aws.ses",
                    }
                    .into());
                }
            }
            Admission::Sns(trust) => {
                let signed = signed(&outer, trust)?;
                let certificate = self.certificate(&signed.certificate_url).await?;
                verify(&signed, &certificate)?;
            }
        }
        Ok(outer)
    }

    async fn certificate(&self, url: &str) -> Result<Arc<Vec<u8>>, Refusal> {
        if let Some(der) = self.kept.lock().ok().and_then(|k| k.get(url).cloned()) {
            return Ok(der);
        }
        let pem = self
            .certificates
            .certificate(url)
            .await
            .map_err(Refusal::Unchecked)?;
        let der = Arc::new(certificate_der(&pem)?);
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= KEPT_CERTIFICATES {
                kept.clear();
            }
            kept.insert(url.to_owned(), Arc::clone(&der));
        }
        Ok(der)
    }
}

/// The certificate source of a gate that never fetches one (the EventBridge path, local tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCertificates;

#[async_trait::async_trait]
impl SigningCertificates for NoCertificates {
    async fn certificate(&self, url: &str) -> Result<Vec<u8>, StoreError> {
        Err(StoreError::msg(
            "fetch SNS signing certificate",
            format!("{url}: this function does not take events through SNS"),
        ))
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("admission", &self.admission)
            .finish_non_exhaustive()
    }
}
