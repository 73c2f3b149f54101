//! The dead-letter queue, its index and the archive in memory.

use super::*;

/// One message of a [`MemoryLetterQueue`].
#[derive(Debug, Clone)]
pub struct QueuedCopy {
    pub id: String,
    pub body: String,
    pub sent_at: DateTime<Utc>,
    pub visible_at: DateTime<Utc>,
    pub receipt: Option<String>,
}

/// A dead-letter queue in memory with SQS's visibility semantics on the given clock.
pub struct MemoryLetterQueue {
    clock: std::sync::Arc<dyn Clock>,
    pub messages: Mutex<Vec<QueuedCopy>>,
    receipts: AtomicUsize,
    pub fail_deletes: FailNext,
}

impl MemoryLetterQueue {
    pub fn new(clock: std::sync::Arc<dyn Clock>) -> Self {
        MemoryLetterQueue {
            clock,
            messages: Mutex::new(Vec::new()),
            receipts: AtomicUsize::new(0),
            fail_deletes: FailNext::default(),
        }
    }

    pub fn push(&self, body: String) {
        let now = self.clock.now();
        let mut m = lock(&self.messages);
        let id = format!("q{}", m.len());
        m.push(QueuedCopy {
            id,
            body,
            sent_at: now,
            visible_at: now,
            receipt: None,
        });
    }

    /// Makes every message visible again (as if every visibility timeout ran out).
    pub fn reveal_all(&self) {
        let now = self.clock.now();
        for m in lock(&self.messages).iter_mut() {
            m.visible_at = now;
        }
    }

    pub fn len(&self) -> usize {
        lock(&self.messages).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait::async_trait]
impl courier_core::ports::LetterQueue for MemoryLetterQueue {
    async fn receive(
        &self,
        max: usize,
        hide: std::time::Duration,
    ) -> Result<Vec<courier_core::ports::QueuedLetter>, StoreError> {
        let now = self.clock.now();
        let until = now + chrono::Duration::from_std(hide).unwrap_or_default();
        let mut out = Vec::new();
        for m in lock(&self.messages)
            .iter_mut()
            .filter(|m| m.visible_at <= now)
            .take(max.clamp(1, 10))
        {
            let receipt = format!(
                "{}#r{}",
                m.id,
                self.receipts.fetch_add(1, Ordering::Relaxed)
            );
            m.visible_at = until;
            m.receipt = Some(receipt.clone());
            out.push(courier_core::ports::QueuedLetter {
                receipt,
                queue_message_id: m.id.clone(),
                body: m.body.clone(),
                sent_at: m.sent_at,
            });
        }
        Ok(out)
    }

    async fn delete(&self, receipts: &[String]) -> Result<(), StoreError> {
        self.fail_deletes.take("delete letters")?;
        lock(&self.messages).retain(|m| !m.receipt.as_ref().is_some_and(|r| receipts.contains(r)));
        Ok(())
    }

    async fn hide(&self, receipt: &str, hide: std::time::Duration) -> Result<(), StoreError> {
        let until = self.clock.now() + chrono::Duration::from_std(hide).unwrap_or_default();
        for m in lock(&self.messages)
            .iter_mut()
            .filter(|m| m.receipt.as_deref() == Some(receipt))
        {
            m.visible_at = until;
        }
        Ok(())
    }
}

/// The dead-letter index in a map.
#[derive(Debug, Default)]
pub struct MemoryLetterIndex {
    pub letters: Mutex<BTreeMap<String, courier_core::letters::IndexedLetter>>,
    pub fail_transitions: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::LetterIndex for MemoryLetterIndex {
    async fn put_new(
        &self,
        letter: &courier_core::letters::IndexedLetter,
    ) -> Result<bool, StoreError> {
        let mut letters = lock(&self.letters);
        if letters.contains_key(&letter.letter_id) {
            return Ok(false);
        }
        letters.insert(letter.letter_id.clone(), letter.clone());
        Ok(true)
    }

    async fn get_many(
        &self,
        ids: &[String],
    ) -> Result<Vec<courier_core::letters::IndexedLetter>, StoreError> {
        let letters = lock(&self.letters);
        let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
        Ok(unique
            .into_iter()
            .filter_map(|id| letters.get(id).cloned())
            .collect())
    }

    async fn transition(
        &self,
        id: &str,
        from: courier_core::letters::LetterState,
        to: courier_core::letters::LetterState,
        archive_key: Option<&str>,
        audit: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.fail_transitions.take("letter transition")?;
        let mut letters = lock(&self.letters);
        let Some(l) = letters.get_mut(id).filter(|l| l.state == from) else {
            return Ok(false);
        };
        l.state = to;
        l.archive_key = archive_key.map(str::to_owned);
        if let Some(a) = audit {
            l.audit.push(a.to_owned());
        }
        Ok(true)
    }

    async fn search(
        &self,
        filter: &courier_core::letters::LetterFilter,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<courier_core::letters::IndexedLetter>, Option<String>), StoreError> {
        let letters = lock(&self.letters);
        let mut all: Vec<&courier_core::letters::IndexedLetter> =
            letters.values().filter(|l| filter.matches(l)).collect();
        all.sort_by(|a, b| {
            b.dead_lettered_at
                .cmp(&a.dead_lettered_at)
                .then(a.letter_id.cmp(&b.letter_id))
        });
        let skip: usize = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
        let page: Vec<_> = all
            .iter()
            .skip(skip)
            .take(limit)
            .map(|l| (*l).clone())
            .collect();
        let next = (skip + page.len() < all.len()).then(|| (skip + page.len()).to_string());
        Ok((page, next))
    }
}

/// An archive bucket in a map.
#[derive(Debug, Default)]
pub struct MemoryArchive {
    pub objects: Mutex<BTreeMap<String, Vec<u8>>>,
    pub fail_puts: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::ArchiveStore for MemoryArchive {
    async fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<bool, StoreError> {
        self.fail_puts.take("archive put")?;
        let mut objects = lock(&self.objects);
        if objects.contains_key(key) {
            return Ok(false);
        }
        objects.insert(key.to_owned(), bytes);
        Ok(true)
    }

    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.objects).contains_key(key))
    }
}

/// A payload store (the claim check's bucket) in a map.
#[derive(Debug, Default)]
pub struct MemoryPayloads {
    pub objects: Mutex<BTreeMap<String, Vec<u8>>>,
    pub fail_puts: FailNext,
    pub fail_gets: FailNext,
    pub fail_copies: FailNext,
}

#[async_trait::async_trait]
impl courier_core::ports::PayloadStore for MemoryPayloads {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.fail_puts.take("payload put")?;
        lock(&self.objects).insert(key.to_owned(), bytes);
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.fail_gets.take("payload get")?;
        Ok(lock(&self.objects).get(key).cloned())
    }

    async fn copy(&self, from: &str, to: &str) -> Result<bool, StoreError> {
        self.fail_copies.take("payload copy")?;
        let mut objects = lock(&self.objects);
        let Some(bytes) = objects.get(from).cloned() else {
            return Ok(false);
        };
        objects.insert(to.to_owned(), bytes);
        Ok(true)
    }
}
