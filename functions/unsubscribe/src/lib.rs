//! The unsubscribe function: one-click unsubscribe (RFC 8058) behind a Lambda function URL.
//!
//! `POST ?t=TOKEN` with the form `List-Unsubscribe=One-Click` records the unsubscription (a
//! suppression with reason `unsubscribed`, scoped to the token's list or global) and answers
//! `200`, with no login and no confirmation; `GET` shows a page whose button makes that POST
//! (mail scanners follow links, so a GET changes nothing); a missing, forged or malformed token
//! gets `400` and changes nothing; replays are idempotent. What a request gets is decided by
//! [`courier_core::unsubscribe::answer`]; [`Unsubscriber::handle`] carries it out.

use std::sync::Arc;

use aws_lambda_events::event::lambda_function_urls::{
    LambdaFunctionUrlRequest, LambdaFunctionUrlResponse,
};
use aws_lambda_events::http::{HeaderMap, HeaderValue, header};
use base64::Engine;
use courier_adapters::seal_secret::SecretSealKeys;
use courier_core::mailbox::address_hash;
use courier_core::ports::{Clock, SuppressionList};
use courier_core::unsubscribe::{Answer, Request, TOKEN_PARAM, confirmation_page, done_page};
use tracing::{info, warn};

/// The function's settings, read once at INIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `COURIER_SUPPRESSION_TABLE`.
    pub suppression_table: String,
    /// `COURIER_UNSUBSCRIBE_KEY_SECRET`: the secret (ARN or name) holding the token keys.
    pub key_secret: String,
}

/// A setting that is missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} is required")]
pub struct SettingsError(pub &'static str);

impl Settings {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingsError> {
        let required = |name: &'static str| {
            lookup(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or(SettingsError(name))
        };
        Ok(Settings {
            suppression_table: required("COURIER_SUPPRESSION_TABLE")?,
            key_secret: required("COURIER_UNSUBSCRIBE_KEY_SECRET")?,
        })
    }
}

/// The function over its ports.
pub struct Unsubscriber {
    pub suppression: Arc<dyn SuppressionList>,
    pub keys: Arc<SecretSealKeys>,
    pub clock: Arc<dyn Clock>,
}

/// The function on AWS clients.
pub fn wire(clients: &courier_adapters::aws::Clients, settings: &Settings) -> Unsubscriber {
    Unsubscriber {
        suppression: Arc::new(courier_adapters::aws::DynamoDbSuppressionList::new(
            clients.dynamodb.clone(),
            &settings.suppression_table,
        )),
        keys: Arc::new(SecretSealKeys::from_secret(
            &settings.key_secret,
            Arc::new(courier_adapters::aws::SecretsManagerSecretStore::new(
                clients.secrets.clone(),
            )),
        )),
        clock: Arc::new(courier_adapters::clock::SystemClock),
    }
}

impl Unsubscriber {
    /// Answers one request (never an error: every failure is an HTTP status), and prints what
    /// it counted as an EMF line (`Unsubscribed`, `UnsubscribeRefused`).
    pub async fn handle(&self, request: &LambdaFunctionUrlRequest) -> LambdaFunctionUrlResponse {
        let (response, counted) = self.answer(request).await;
        if let Some(metric) = counted {
            println!("{}", emf(self.clock.now().timestamp_millis(), metric));
        }
        response
    }

    /// The response to one request, and the metric it counts, if any.
    pub async fn answer(
        &self,
        request: &LambdaFunctionUrlRequest,
    ) -> (LambdaFunctionUrlResponse, Option<&'static str>) {
        let method = request.request_context.http.method.as_deref().unwrap_or("");
        let token = token_of(request);
        let body = body_of(request);
        let Some(body) = body else {
            return (
                respond(400, "text/plain", "the request body is not valid base64\n"),
                None,
            );
        };
        let keys = match self.keys.keys().await {
            Ok(keys) => keys,
            Err(e) => {
                warn!(error = %e, "the unsubscribe keys could not be read");
                return (respond(503, "text/plain", "try again in a minute\n"), None);
            }
        };
        let content_type = request
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let answer = courier_core::unsubscribe::answer(
            &Request {
                method,
                token: token.as_deref(),
                content_type,
                body: &body,
            },
            &keys,
        );
        let counted = match &answer {
            Answer::Unsubscribe(_) => Some("Unsubscribed"),
            Answer::BadRequest(_) => Some("UnsubscribeRefused"),
            Answer::Confirm(_) | Answer::MethodNotAllowed => None,
        };
        let response = match answer {
            Answer::Unsubscribe(subscription) => {
                let now = self.clock.now();
                match self
                    .suppression
                    .unsubscribe(&subscription.address, &subscription.scope, now)
                    .await
                {
                    Ok(written) => {
                        info!(
                            recipient = %address_hash(&subscription.address),
                            scope = %subscription.scope,
                            written,
                            "unsubscribed"
                        );
                        respond(200, "text/html; charset=utf-8", &done_page(&subscription))
                    }
                    Err(e) => {
                        warn!(error = %e, "the unsubscription could not be recorded");
                        return (respond(503, "text/plain", "try again in a minute\n"), None);
                    }
                }
            }
            Answer::Confirm(subscription) => {
                let page = confirmation_page(&subscription, token.as_deref().unwrap_or(""));
                if method.eq_ignore_ascii_case("HEAD") {
                    respond(200, "text/html; charset=utf-8", "")
                } else {
                    respond(200, "text/html; charset=utf-8", &page)
                }
            }
            Answer::BadRequest(why) => {
                info!(%why, "unsubscribe request refused");
                respond(
                    400,
                    "text/plain",
                    "this unsubscribe link is not valid; nothing was changed\n",
                )
            }
            Answer::MethodNotAllowed => {
                let mut response = respond(405, "text/plain", "use GET or POST\n");
                response
                    .headers
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, POST"));
                response
            }
        };
        (response, counted)
    }
}

/// The token: the `t` query parameter (from the parsed map, else the raw query string).
fn token_of(request: &LambdaFunctionUrlRequest) -> Option<String> {
    if let Some(t) = request.query_string_parameters.get(TOKEN_PARAM) {
        return Some(t.clone());
    }
    request
        .raw_query_string
        .as_deref()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{TOKEN_PARAM}=")))
        .map(str::to_owned)
}

/// The body's bytes (function URLs base64-encode bodies they do not take for text).
fn body_of(request: &LambdaFunctionUrlRequest) -> Option<Vec<u8>> {
    let body = request.body.as_deref().unwrap_or("");
    if request.is_base64_encoded {
        base64::engine::general_purpose::STANDARD.decode(body).ok()
    } else {
        Some(body.as_bytes().to_vec())
    }
}

/// A response that no cache keeps and no page leaks the token from (`Referrer-Policy`).
fn respond(status: i64, content_type: &'static str, body: &str) -> LambdaFunctionUrlResponse {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; form-action 'self'"),
    );
    let mut response = LambdaFunctionUrlResponse::default();
    response.status_code = status;
    response.headers = headers;
    response.body = Some(body.to_owned());
    response
}

/// One count as an EMF document (namespace `Courier`, dimension `Function`).
pub fn emf(timestamp_ms: i64, name: &str) -> serde_json::Value {
    serde_json::json!({
        "_aws": {"Timestamp": timestamp_ms, "CloudWatchMetrics": [{
            "Namespace": "Courier", "Dimensions": [["Function"]],
            "Metrics": [{"Name": name, "Unit": "Count"}]}]},
        "Function": "unsubscribe",
        name: 1,
    })
}

#[cfg(test)]
mod tests;
