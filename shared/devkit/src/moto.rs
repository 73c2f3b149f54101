//! moto's own record of what it holds (`/moto-api/data.json`): among it the messages its SES
//! accepted, evidence that no Courier code wrote.

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Why moto's state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MotoStateError {
    #[error("moto's URL {0:?} is not http://host:port")]
    Url(String),
    #[error("reading moto's state at {url}: {source}")]
    Io {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("moto's /moto-api/data.json answered no 200 in {tries} tries; the last: {last}")]
    Refused { tries: u32, last: String },
    #[error("moto's state is not the JSON expected: {0}")]
    Parse(String),
}

/// A message moto's SES accepted (`SendEmail` with raw content, or `SendRawEmail`), as its state
/// holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SesRawMessage {
    /// SES's message id (what `SendEmail` answered).
    pub id: String,
    pub source: String,
    pub destinations: Vec<String>,
    /// The raw MIME message.
    pub raw_data: String,
}

/// Every message moto's SES accepted, in the order it accepted them, from its state as [`state`]
/// returns it (the HTTP answer: status line, headers, then the JSON body).
pub fn ses_raw_messages(state: &str) -> Result<Vec<SesRawMessage>, MotoStateError> {
    let body = state.split_once("\r\n\r\n").map_or(state, |(_, body)| body);
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| MotoStateError::Parse(e.to_string()))?;
    let Some(list) = json.pointer("/ses/RawMessage") else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| MotoStateError::Parse("ses.RawMessage is not a list".into()))?;
    list.iter()
        .map(|m| {
            let text = |k: &str| {
                m.get(k)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| MotoStateError::Parse(format!("a RawMessage without {k}")))
            };
            Ok(SesRawMessage {
                id: text("id")?,
                source: text("source")?,
                raw_data: text("raw_data")?,
                destinations: m
                    .get("destinations")
                    .and_then(serde_json::Value::as_array)
                    .map(|d| {
                        d.iter()
                            .filter_map(|a| a.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// moto's dump of its whole state. It answers 500 while some DynamoDB state holds a value its
/// JSON encoder cannot write (seen in CI: `TypeError: keys must be str, int, float, bool or None,
/// not DynamoType`, with other tests running alongside), so a refused dump is asked for again:
/// 40 tries, 250 ms apart.
pub async fn state(moto: &str) -> Result<String, MotoStateError> {
    const TRIES: u32 = 40;
    let url = format!("{}/moto-api/data.json", moto.trim_end_matches('/'));
    let mut last = String::new();
    for _ in 0..TRIES {
        last = get(&url).await?;
        if last.split_whitespace().nth(1) == Some("200") {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(MotoStateError::Refused {
        tries: TRIES,
        last: last.lines().next().unwrap_or_default().to_owned(),
    })
}

/// How many messages moto's SES accepted per `X-Courier-Message-Id` header value, from its
/// state as [`state`] returns it ([`ses_raw_messages`], each message's header read by
/// [`crate::mime::header`]).
pub fn ses_messages_by_id(state: &str) -> Result<HashMap<String, usize>, MotoStateError> {
    let mut out: HashMap<String, usize> = HashMap::new();
    for message in ses_raw_messages(state)? {
        if let Some(id) = crate::mime::header(&message.raw_data, "X-Courier-Message-Id") {
            *out.entry(id).or_default() += 1;
        }
    }
    Ok(out)
}

/// A GET over a plain TCP socket (the emulator is on loopback; no HTTP client needed): the whole
/// answer, status line and headers included.
async fn get(url: &str) -> Result<String, MotoStateError> {
    let io = |source| MotoStateError::Io {
        url: url.to_owned(),
        source,
    };
    let (host, path) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .ok_or_else(|| MotoStateError::Url(url.to_owned()))?;
    let mut stream = tokio::net::TcpStream::connect(host).await.map_err(io)?;
    stream
        .write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await
        .map_err(io)?;
    let mut out = Vec::new();
    stream.read_to_end(&mut out).await.map_err(io)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ses_messages_are_counted_by_their_courier_message_id() {
        let message = |id: &str, raw: &str| {
            format!(
                r#"{{"id": "{id}", "source": "a@x", "destinations": ["b@y"], "raw_data": "{raw}"}}"#
            )
        };
        let state = format!(
            "HTTP/1.0 200 OK\r\n\r\n{{\"ses\": {{\"RawMessage\": [{}, {}, {}, {}]}}}}",
            message(
                "s1",
                r"From: a@x\r\nX-Courier-Message-Id: chaos-1-000016\r\nSubject: s\r\n\r\nbody"
            ),
            message("s2", r"x-courier-message-id: chaos-1-000016\r\n"),
            message("s3", r"X-Courier-Message-Id: chaos-1-000017"),
            message(
                "s4",
                r"Subject: not Courier's\r\n\r\nX-Courier-Message-Id: in-the-body"
            ),
        );
        let by_id = ses_messages_by_id(&state).unwrap();
        assert_eq!(by_id.get("chaos-1-000016"), Some(&2));
        assert_eq!(by_id.get("chaos-1-000017"), Some(&1));
        assert_eq!(by_id.len(), 2);
    }

    #[test]
    fn raw_messages_are_read_from_the_state_behind_the_http_headers() {
        let state = "HTTP/1.0 200 OK\r\nContent-Type: application/javascript\r\n\r\n\
            {\"ses\": {\"RawMessage\": [{\"id\": \"m-1\", \"source\": \"a@x\", \
            \"destinations\": [\"b@y\"], \"raw_data\": \"Subject: s\\r\\n\"}]}}";
        let raw = ses_raw_messages(state).unwrap();
        assert_eq!(raw.len(), 1);
        assert_eq!(raw[0].id, "m-1");
        assert_eq!(raw[0].destinations, vec!["b@y".to_owned()]);
        assert_eq!(raw[0].raw_data, "Subject: s\r\n");
        // No SES message yet: none; not JSON: an error.
        assert!(
            ses_raw_messages("HTTP/1.0 200 OK\r\n\r\n{}")
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            ses_raw_messages("HTTP/1.0 200 OK\r\n\r\nnot json"),
            Err(MotoStateError::Parse(_))
        ));
    }

    #[tokio::test]
    async fn a_url_that_is_not_plain_http_is_refused() {
        assert!(matches!(
            state("https://127.0.0.1:1").await,
            Err(MotoStateError::Url(_))
        ));
    }
}
