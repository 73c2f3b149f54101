//! A Lambda function URL on the loopback, for the emulators: each HTTP/1.1 request (one per
//! connection) is turned into the event a function URL sends (payload version 2.0, the body
//! base64-encoded) and the unsubscribe function's response is written back. No emulator runs
//! function URLs; this stands in for the URL, not for the function, which runs as it is.

use std::sync::Arc;

use aws_lambda_events::event::lambda_function_urls::{
    LambdaFunctionUrlRequest, LambdaFunctionUrlResponse,
};
use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The largest request read (headers and body); a one-click POST is a few hundred bytes.
const MAX_REQUEST: usize = 64 * 1024;

/// Serves `unsubscriber` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, unsubscriber: Arc<courier_unsubscribe::Unsubscriber>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let unsubscriber = Arc::clone(&unsubscriber);
        tokio::spawn(async move {
            let _ = answer(stream, &unsubscriber).await;
        });
    }
}

async fn answer(
    mut stream: TcpStream,
    unsubscriber: &courier_unsubscribe::Unsubscriber,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buffer.extend_from_slice(&chunk[..n]);
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > MAX_REQUEST {
            return write(&mut stream, 431, "text/plain", b"too large").await;
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or("").split(' ');
    let (method, target) = (
        request_line.next().unwrap_or("").to_owned(),
        request_line.next().unwrap_or("/").to_owned(),
    );
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
        .min(MAX_REQUEST);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    let request = event(&method, &target, &headers, &body);
    let response: LambdaFunctionUrlResponse = unsubscriber.handle(&request).await;
    let content_type = response
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("text/plain")
        .to_owned();
    let status = u16::try_from(response.status_code).unwrap_or(500);
    write(
        &mut stream,
        status,
        &content_type,
        response.body.unwrap_or_default().as_bytes(),
    )
    .await
}

/// The function URL event of one request.
fn event(
    method: &str,
    target: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> LambdaFunctionUrlRequest {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params: serde_json::Map<String, serde_json::Value> = query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v.to_owned())))
        .collect();
    let header_map: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::from_value(serde_json::json!({
        "version": "2.0",
        "rawPath": path,
        "rawQueryString": query,
        "headers": header_map,
        "queryStringParameters": params,
        "requestContext": {
            "accountId": "anonymous",
            "http": {"method": method, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
            "timeEpoch": chrono::Utc::now().timestamp_millis()
        },
        "body": base64::engine::general_purpose::STANDARD.encode(body),
        "isBase64Encoded": true
    }))
    .unwrap_or_default()
}

async fn write(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.shutdown().await
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One HTTP/1.1 request to a loopback URL (`http://127.0.0.1:PORT/path?query`), as a mailbox
/// provider's one-click POST or a reader's click would make it: the status code and the body.
pub async fn request(url: &str, method: &str, form: &str) -> std::io::Result<(u16, String)> {
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidInput, url.to_owned());
    let rest = url.strip_prefix("http://").ok_or_else(invalid)?;
    let (host, target) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let target = if target.is_empty() { "/" } else { target };
    let mut stream = TcpStream::connect(host).await?;
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response);
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(invalid)?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// The value of a delivered message's header (RFC 5322 continuation lines unfolded).
pub fn header(mail: &str, name: &str) -> Option<String> {
    let unfolded = mail
        .replace("\r\n", "\n")
        .replace("\n ", " ")
        .replace("\n\t", " ");
    unfolded
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            l.split_once(':')
                .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        })
}

/// The first URI of a message's `List-Unsubscribe` (the one-click link Courier puts first).
pub fn unsubscribe_link(mail: &str) -> Option<String> {
    let value = header(mail, "List-Unsubscribe")?;
    let start = value.find('<')? + 1;
    let end = start + value[start..].find('>')?;
    Some(value[start..end].to_owned())
}
