//! The handler on function URL requests of the shape AWS documents (payload version 2.0), over
//! the in-memory suppression list.

use super::*;
use chrono::{DateTime, TimeZone, Utc};
use courier_core::ports::{SecretStore, StoreError};
use courier_core::seal::SealKeys;
use courier_core::unsubscribe::{Scope, token};
use courier_devkit::faults::{Fault, Faults, Faulty};
use courier_devkit::memory::{ManualClock, MemorySuppressionList};

const KEY: &str = "an unsubscribe key of forty characters..";

fn keys() -> SealKeys {
    SealKeys::new(KEY, &[]).unwrap()
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 9, 0, 0).unwrap()
}

fn unsubscriber(list: Arc<dyn SuppressionList>) -> Unsubscriber {
    Unsubscriber {
        suppression: list,
        keys: Arc::new(SecretSealKeys::fixed(keys())),
        clock: Arc::new(ManualClock::new(t0())),
    }
}

/// A function URL request (AWS's documented payload, version 2.0).
fn request(
    method: &str,
    query: &str,
    content_type: &str,
    body: &str,
    base64: bool,
) -> LambdaFunctionUrlRequest {
    let body = if base64 {
        base64::engine::general_purpose::STANDARD.encode(body)
    } else {
        body.to_owned()
    };
    let params: serde_json::Map<String, serde_json::Value> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.to_owned())))
        .collect();
    serde_json::from_value(serde_json::json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "rawQueryString": query,
        "headers": {
            "content-type": content_type,
            "host": "abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws",
            "user-agent": "Mozilla/5.0",
            "x-forwarded-proto": "https"
        },
        "queryStringParameters": params,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "abcdefghijklmnopqrstuvwxyz012345",
            "domainName": "abcdefghijklmnopqrstuvwxyz012345.lambda-url.eu-west-1.on.aws",
            "domainPrefix": "abcdefghijklmnopqrstuvwxyz012345",
            "http": {
                "method": method,
                "path": "/",
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.7",
                "userAgent": "Mozilla/5.0"
            },
            "requestId": "id",
            "routeKey": "$default",
            "stage": "$default",
            "time": "02/Dec/2026:09:00:00 +0000",
            "timeEpoch": 1796202000000_i64
        },
        "body": body,
        "isBase64Encoded": base64
    }))
    .unwrap()
}

const FORM: &str = "application/x-www-form-urlencoded";
const ONE_CLICK: &str = "List-Unsubscribe=One-Click";

fn news_token(address: &str) -> String {
    token(address, &Scope::List("news".into()), &keys())
}

#[tokio::test]
async fn a_one_click_post_unsubscribes_from_the_list_once_and_replays_change_nothing() {
    // GIVEN a token for ann on the list "news"
    let list = Arc::new(MemorySuppressionList::default());
    let u = unsubscriber(list.clone());
    let query = format!("t={}", news_token("Ann <Ann@Example.org>"));
    // WHEN the mailbox provider POSTs the one-click form (base64, as function URLs pass forms)
    let response = u
        .handle(&request("POST", &query, FORM, ONE_CLICK, true))
        .await;
    // THEN 200, and ann is unsubscribed from "news" only
    assert_eq!(response.status_code, 200);
    assert!(response.body.as_deref().unwrap().contains("<b>news</b>"));
    assert_eq!(response.headers["cache-control"], "no-store");
    assert_eq!(response.headers["referrer-policy"], "no-referrer");
    let ann = vec!["ann@example.org".to_owned()];
    assert_eq!(list.unsubscribed(&ann, "news").await.unwrap(), ann);
    assert!(list.unsubscribed(&ann, "offers").await.unwrap().is_empty());
    assert!(
        !list.is_suppressed("ann@example.org", t0()),
        "not a global suppression"
    );
    // AND a replay (plain text body this time) answers 200 and adds nothing
    let again = u
        .handle(&request("POST", &query, FORM, ONE_CLICK, false))
        .await;
    assert_eq!(again.status_code, 200);
    let (entries, _) = list.list(10, None).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].list.as_deref(), Some("news"));
    assert_eq!(entries[0].reason, "unsubscribed");
}

#[tokio::test]
async fn a_global_token_suppresses_every_mail_but_never_softens_a_bounce() {
    let list = Arc::new(MemorySuppressionList::default());
    let u = unsubscriber(list.clone());
    let global = token("bob@example.org", &Scope::Global, &keys());
    let response = u
        .handle(&request(
            "POST",
            &format!("t={global}"),
            FORM,
            ONE_CLICK,
            false,
        ))
        .await;
    assert_eq!(response.status_code, 200);
    assert!(list.is_suppressed("bob@example.org", t0() + chrono::Duration::days(3650)));
    // A hard bounce's entry is kept as it is.
    list.suppress("carol@example.org", "bounce: 550 5.1.1", t0())
        .await
        .unwrap();
    let carol = token("carol@example.org", &Scope::Global, &keys());
    u.handle(&request(
        "POST",
        &format!("t={carol}"),
        FORM,
        ONE_CLICK,
        false,
    ))
    .await;
    assert_eq!(
        list.entries.lock().unwrap()["carol@example.org"],
        "bounce: 550 5.1.1"
    );
}

#[tokio::test]
async fn a_get_shows_a_button_that_posts_and_changes_nothing() {
    let list = Arc::new(MemorySuppressionList::default());
    let u = unsubscriber(list.clone());
    let t = news_token("ann@example.org");
    let response = u
        .handle(&request("GET", &format!("t={t}"), "", "", false))
        .await;
    assert_eq!(response.status_code, 200);
    assert_eq!(response.headers["content-type"], "text/html; charset=utf-8");
    let page = response.body.unwrap();
    assert!(page.contains("<form method=\"post\""), "{page}");
    assert!(page.contains(&format!("action=\"?t={t}\"")), "{page}");
    assert!(page.contains("name=\"List-Unsubscribe\" value=\"One-Click\""));
    let head = u
        .handle(&request("HEAD", &format!("t={t}"), "", "", false))
        .await;
    assert_eq!((head.status_code, head.body.as_deref()), (200, Some("")));
    assert!(
        list.entries.lock().unwrap().is_empty(),
        "a GET changes nothing"
    );
}

#[tokio::test]
async fn forged_tampered_or_missing_tokens_get_400_and_change_nothing() {
    let list = Arc::new(MemorySuppressionList::default());
    let u = unsubscriber(list.clone());
    let good = news_token("ann@example.org");
    let mut tampered = good.clone().into_bytes();
    let mid = tampered.len() / 3;
    tampered[mid] = if tampered[mid] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let other_key = token(
        "ann@example.org",
        &Scope::Global,
        &SealKeys::new(&"x".repeat(40), &[]).unwrap(),
    );
    for query in [
        format!("t={tampered}"),
        format!("t={other_key}"),
        "t=".to_owned(),
        String::new(),
        "t=1.%00.%00".to_owned(),
    ] {
        for method in ["POST", "GET"] {
            let response = u
                .handle(&request(method, &query, FORM, ONE_CLICK, false))
                .await;
            assert_eq!(response.status_code, 400, "{method} {query}");
            assert!(!response.body.unwrap().contains("ann"));
        }
    }
    // A POST without the one-click form, or of another type, is refused too.
    let q = format!("t={good}");
    for (ct, body) in [
        (FORM, "List-Unsubscribe=Yes"),
        ("text/plain", ONE_CLICK),
        (FORM, ""),
    ] {
        assert_eq!(
            u.handle(&request("POST", &q, ct, body, false))
                .await
                .status_code,
            400
        );
    }
    // A body that is not base64 although it says so.
    let mut bad = request("POST", &q, FORM, ONE_CLICK, false);
    bad.is_base64_encoded = true;
    bad.body = Some("***".into());
    assert_eq!(u.handle(&bad).await.status_code, 400);
    // Other methods.
    let put = u.handle(&request("PUT", &q, FORM, ONE_CLICK, false)).await;
    assert_eq!(put.status_code, 405);
    assert_eq!(put.headers["allow"], "GET, HEAD, POST");
    assert!(list.entries.lock().unwrap().is_empty());
}

#[tokio::test]
async fn multipart_one_click_forms_are_accepted() {
    let list = Arc::new(MemorySuppressionList::default());
    let u = unsubscriber(list.clone());
    let body = "--b1\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b1--\r\n";
    let response = u
        .handle(&request(
            "POST",
            &format!("t={}", news_token("ann@example.org")),
            "multipart/form-data; boundary=b1",
            body,
            true,
        ))
        .await;
    assert_eq!(response.status_code, 200);
    assert_eq!(list.entries.lock().unwrap().len(), 1);
}

struct NoSecret;

#[async_trait::async_trait]
impl SecretStore for NoSecret {
    async fn secret_string(&self, _: &str) -> Result<String, StoreError> {
        Err(StoreError::msg("GetSecretValue", "access denied"))
    }
}

#[tokio::test]
async fn a_store_or_key_failure_is_503_so_the_provider_tries_again() {
    // The write fails: 503, nothing recorded.
    let list = Arc::new(MemorySuppressionList::default());
    let faults = Arc::new(Faults::default());
    faults.arm(0, Fault::FailBefore);
    let u = unsubscriber(Arc::new(Faulty::new(list.clone(), faults)));
    let q = format!("t={}", news_token("ann@example.org"));
    let response = u.handle(&request("POST", &q, FORM, ONE_CLICK, false)).await;
    assert_eq!(response.status_code, 503);
    assert!(list.entries.lock().unwrap().is_empty());
    // The keys cannot be read: 503, before any token is judged.
    let mut u = unsubscriber(list.clone());
    u.keys = Arc::new(SecretSealKeys::from_secret(
        "courier-unsubscribe",
        Arc::new(NoSecret),
    ));
    let response = u.handle(&request("POST", &q, FORM, ONE_CLICK, false)).await;
    assert_eq!(response.status_code, 503);
    assert!(list.entries.lock().unwrap().is_empty());
}

#[test]
fn settings_name_the_missing_variable() {
    let env = |k: &str| match k {
        "COURIER_SUPPRESSION_TABLE" => Some("sup".to_owned()),
        _ => None,
    };
    assert_eq!(
        Settings::from_lookup(env),
        Err(SettingsError("COURIER_UNSUBSCRIBE_KEY_SECRET"))
    );
    assert_eq!(
        Settings::from_lookup(|_| None),
        Err(SettingsError("COURIER_SUPPRESSION_TABLE"))
    );
}

#[tokio::test]
async fn an_unsubscription_and_a_refusal_are_counted_and_nothing_else_is() {
    let list = Arc::new(MemorySuppressionList::default());
    let u = unsubscriber(list.clone());
    let q = format!("t={}", news_token("ann@example.org"));
    let counted = |r: (LambdaFunctionUrlResponse, Option<&'static str>)| (r.0.status_code, r.1);
    assert_eq!(
        counted(u.answer(&request("POST", &q, FORM, ONE_CLICK, false)).await),
        (200, Some("Unsubscribed"))
    );
    assert_eq!(
        counted(
            u.answer(&request("POST", "t=1.x.y", FORM, ONE_CLICK, false))
                .await
        ),
        (400, Some("UnsubscribeRefused"))
    );
    // A confirmation page, another method, a failed write: not counted.
    assert_eq!(
        counted(u.answer(&request("GET", &q, FORM, "", false)).await),
        (200, None)
    );
    assert_eq!(
        counted(u.answer(&request("PUT", &q, FORM, ONE_CLICK, false)).await),
        (405, None)
    );
    let faults = Arc::new(Faults::default());
    faults.arm(0, Fault::FailBefore);
    let failing = unsubscriber(Arc::new(Faulty::new(list.clone(), faults)));
    assert_eq!(
        counted(
            failing
                .answer(&request("POST", &q, FORM, ONE_CLICK, false))
                .await
        ),
        (503, None)
    );
    // The line: one count in namespace Courier, dimension Function=unsubscribe.
    let line = emf(1_800_000_000_000, "Unsubscribed");
    assert_eq!(line["Unsubscribed"], 1);
    assert_eq!(line["Function"], "unsubscribe");
    let declared = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(declared["Namespace"], "Courier");
    assert_eq!(declared["Dimensions"], serde_json::json!([["Function"]]));
    assert_eq!(
        declared["Metrics"],
        serde_json::json!([{"Name": "Unsubscribed", "Unit": "Count"}])
    );
    assert_eq!(line["_aws"]["Timestamp"], 1_800_000_000_000_i64);
}
