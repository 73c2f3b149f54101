//! [`HttpsSigningCertificates`]: SNS signing certificates over HTTPS (hyper with rustls on ring,
//! the system's roots: the same stack as the SDK's client).

use std::time::Duration;

use courier_core::ports::{SigningCertificates, StoreError};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The most a certificate may weigh (SNS's are under 2 KiB).
pub const MAX_CERTIFICATE_BYTES: usize = 64 * 1024;

/// How long one fetch may take before the message is retried.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Fetches a certificate by its `https://` URL: status 200, at most [`MAX_CERTIFICATE_BYTES`],
/// within [`FETCH_TIMEOUT`]. Any failure is a [`StoreError`] (the message is retried).
pub struct HttpsSigningCertificates {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl HttpsSigningCertificates {
    /// With the system's trusted roots.
    pub fn new() -> Result<HttpsSigningCertificates, StoreError> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| StoreError::new("load trusted roots", e))?
            .https_only()
            .enable_http1()
            .build();
        Ok(Self::with_connector(connector))
    }

    /// With the given roots only (tests: a local server's own certificate).
    pub fn with_roots(
        roots: rustls::RootCertStore,
    ) -> Result<HttpsSigningCertificates, StoreError> {
        let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::new("configure TLS", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .build();
        Ok(Self::with_connector(connector))
    }

    fn with_connector(connector: hyper_rustls::HttpsConnector<HttpConnector>) -> Self {
        HttpsSigningCertificates {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }
}

#[async_trait::async_trait]
impl SigningCertificates for HttpsSigningCertificates {
    async fn certificate(&self, url: &str) -> Result<Vec<u8>, StoreError> {
        const OP: &str = "fetch SNS signing certificate";
        if !url.starts_with("https://") {
            return Err(StoreError::msg(OP, format!("{url} is not an https URL")));
        }
        let uri: hyper::Uri = url.parse().map_err(|e| StoreError::new(OP, e))?;
        let fetch = async {
            let response = self
                .client
                .get(uri)
                .await
                .map_err(|e| StoreError::new(OP, e))?;
            if response.status() != hyper::StatusCode::OK {
                return Err(StoreError::msg(
                    OP,
                    format!("{url} answered {}", response.status()),
                ));
            }
            let body = Limited::new(response.into_body(), MAX_CERTIFICATE_BYTES)
                .collect()
                .await
                .map_err(|e| StoreError::msg(OP, format!("{url}: {e}")))?;
            Ok(body.to_bytes().to_vec())
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| StoreError::msg(OP, format!("{url}: no answer in {FETCH_TIMEOUT:?}")))?
    }
}
