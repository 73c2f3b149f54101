//! `HttpsSigningCertificates` against a local HTTPS server holding the SNS test certificate
//! (`functions/events/fixtures/sns`, issued for `localhost`): what it fetches, and what it
//! refuses.

#![allow(clippy::unwrap_used)] // test helpers fail the test loudly

use std::sync::Arc;

use courier_adapters::https::{HttpsSigningCertificates, MAX_CERTIFICATE_BYTES};
use courier_core::ports::SigningCertificates;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

fn sns_file(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../functions/events/fixtures/sns/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Serves `/cert.pem` (the certificate), `/huge.pem` (too large) and 404 for anything else,
/// over TLS with the test key; returns the port.
async fn serve() -> u16 {
    let certificate = CertificateDer::from_pem_slice(&sns_file("test-cert.pem")).unwrap();
    let key = PrivateKeyDer::from_pem_slice(&sns_file("test-key.pem")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certificate], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split_whitespace().nth(1).unwrap_or_default();
                let (status, body) = match path {
                    "/cert.pem" => ("200 OK", sns_file("test-cert.pem")),
                    "/huge.pem" => ("200 OK", vec![b'A'; MAX_CERTIFICATE_BYTES + 1]),
                    _ => ("404 Not Found", b"no such certificate".to_vec()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.write_all(&body).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    port
}

fn client() -> HttpsSigningCertificates {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(&sns_file("test-cert.pem")).unwrap())
        .unwrap();
    HttpsSigningCertificates::with_roots(roots).unwrap()
}

#[tokio::test]
async fn fetches_the_certificate_over_https() {
    let port = serve().await;
    let pem = client()
        .certificate(&format!("https://localhost:{port}/cert.pem"))
        .await
        .unwrap();
    assert_eq!(pem, sns_file("test-cert.pem"));
}

#[tokio::test]
async fn refuses_plain_http_other_answers_oversized_bodies_and_untrusted_servers() {
    let port = serve().await;
    let client = client();
    let error = client
        .certificate(&format!("http://localhost:{port}/cert.pem"))
        .await
        .unwrap_err();
    assert!(error.message.contains("not an https URL"), "{error}");
    let error = client
        .certificate(&format!("https://localhost:{port}/missing.pem"))
        .await
        .unwrap_err();
    assert!(error.message.contains("404"), "{error}");
    let error = client
        .certificate(&format!("https://localhost:{port}/huge.pem"))
        .await
        .unwrap_err();
    assert!(error.message.contains("huge.pem"), "{error}");
    // A server whose certificate does not name the host asked for (127.0.0.1 is not in it).
    let error = client
        .certificate(&format!("https://127.0.0.1:{port}/cert.pem"))
        .await
        .unwrap_err();
    assert_eq!(error.operation, "fetch SNS signing certificate");
    // Nothing listens on port 9 (discard) here: a connection error, not a hang or a panic.
    assert!(
        client
            .certificate("https://localhost:9/cert.pem")
            .await
            .is_err()
    );
}
