//! Templates stored in S3 as `templates/{id}.json` = `{"subject": ..., "text": ..., "html": ...}`,
//! cached across invocations and revalidated with the object's ETag after `ttl`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_s3::error::ProvideErrorMetadata;
use serde::Deserialize;

use super::store_error as err;
use courier_core::ports::{StoreError, Template, TemplateError, TemplateStore};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredTemplate {
    subject: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    html: Option<String>,
}

#[derive(Clone)]
struct Entry {
    template: Template,
    etag: Option<String>,
    checked: Instant,
}

/// The S3 template store.
pub struct S3TemplateStore {
    client: aws_sdk_s3::Client,
    bucket: String,
    ttl: Duration,
    cache: Mutex<HashMap<String, Entry>>,
}

impl S3TemplateStore {
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>, ttl: Duration) -> Self {
        S3TemplateStore {
            client,
            bucket: bucket.into(),
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The object key of a template.
    pub fn key(id: &str) -> String {
        format!("templates/{id}.json")
    }

    fn cached(&self, id: &str) -> Option<Entry> {
        self.cache.lock().ok().and_then(|c| c.get(id).cloned())
    }

    fn store(&self, id: &str, entry: Entry) {
        if let Ok(mut c) = self.cache.lock() {
            c.insert(id.to_owned(), entry);
        }
    }
}

#[async_trait::async_trait]
impl TemplateStore for S3TemplateStore {
    async fn get(&self, id: &str) -> Result<Template, TemplateError> {
        let cached = self.cached(id);
        if let Some(entry) = cached.as_ref().filter(|e| e.checked.elapsed() < self.ttl) {
            return Ok(entry.template.clone());
        }
        let mut request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(Self::key(id));
        if let Some(etag) = cached.as_ref().and_then(|e| e.etag.clone()) {
            request = request.if_none_match(etag);
        }
        let out = match request.send().await {
            Ok(out) => out,
            Err(e) => {
                let status = e.raw_response().map(|r| r.status().as_u16());
                if status == Some(304)
                    && let Some(mut entry) = cached
                {
                    entry.checked = Instant::now();
                    self.store(id, entry.clone());
                    return Ok(entry.template);
                }
                if e.as_service_error().is_some_and(|s| s.is_no_such_key()) || status == Some(404) {
                    return Err(TemplateError::NotFound(id.to_owned()));
                }
                return Err(TemplateError::Store(err("template get")(e)));
            }
        };
        let etag = out.e_tag.clone();
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::new("template read", e))?
            .into_bytes();
        let stored: StoredTemplate = serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::msg("template parse", format!("{}: {e}", Self::key(id))))?;
        let template = Template {
            subject: stored.subject,
            text: stored.text,
            html: stored.html,
        };
        self.store(
            id,
            Entry {
                template: template.clone(),
                etag,
                checked: Instant::now(),
            },
        );
        Ok(template)
    }
}

/// The claim check's payload store: bodies too large for a queue, under
/// [`courier_core::claim_check::KEY_PREFIX`] in a bucket whose lifecycle rule expires them.
pub struct S3PayloadStore {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3PayloadStore {
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        S3PayloadStore {
            client,
            bucket: bucket.into(),
        }
    }
}

#[async_trait::async_trait]
impl courier_core::ports::PayloadStore for S3PayloadStore {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(bytes.into())
            .content_type("application/json")
            .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
            .send()
            .await
            .map_err(err("payload put"))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            // Only a missing key is a missing body: a missing bucket (also a 404) is an error.
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(err("payload get")(e)),
        };
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::new("payload get", e))?;
        Ok(Some(bytes.into_bytes().to_vec()))
    }

    async fn copy(&self, from: &str, to: &str) -> Result<bool, StoreError> {
        // CopySource is `bucket/key` URL-encoded; Courier's keys are `[a-z0-9/-]` only, which
        // need no encoding. Objects up to 5 GB copy in one call (attachments are at most 10 MiB).
        match self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(to)
            .copy_source(format!("{}/{from}", self.bucket))
            // No tags copied: copying them would need s3:GetObjectTagging and
            // s3:PutObjectTagging, which no role has.
            .tagging_directive(aws_sdk_s3::types::TaggingDirective::Replace)
            .server_side_encryption(aws_sdk_s3::types::ServerSideEncryption::Aes256)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            // CopyObject names a missing source `NoSuchKey` (404); a missing bucket is
            // `NoSuchBucket` and stays an error.
            Err(e) if e.as_service_error().and_then(|s| s.code()) == Some("NoSuchKey") => Ok(false),
            Err(e) => Err(err("payload copy")(e)),
        }
    }
}
