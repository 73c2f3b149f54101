//! Dead letters end to end on the emulators: the send function indexes and queues them, the
//! archiver moves them to S3, and the objects read back equal what was dead-lettered.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers fail the test loudly

use std::collections::BTreeMap;
use std::time::Duration;

use courier_adapters::aws::{Clients, DynamoDbLetterIndex};
use courier_core::letters::{IndexedLetter, LetterFilter, LetterState};
use courier_core::policy::DeadLetterCategory;
use courier_core::ports::{LetterIndex, LetterQueue};
use courier_integration::Stack;

fn job(stack: &Stack, id: &str, to: &str) -> String {
    serde_json::json!({
        "version": 1, "message_id": id, "campaign_id": "archive", "from": stack.sender,
        "to": [to], "content": {"subject": "Hello", "text": "hello"}
    })
    .to_string()
}

#[tokio::test]
async fn dead_letters_are_indexed_archived_and_read_back_equal() {
    let stack = Stack::create(&["smtp"]).await;
    let clients = Clients::new(&stack.sdk);
    let pipeline = stack.send_pipeline();
    // Four letters of three categories, and one raw message SQS redrove.
    let sqs = stack.sqs();
    for body in [
        job(&stack, "arch-policy", "policy@courier.test"),
        job(&stack, "arch-invalid", "not an address"),
        "{\"version\": 1, \"message_id\": \"arch-broken\"".to_owned(),
        job(&stack, "arch-policy-2", "policy@courier.test"),
    ] {
        sqs.send_message()
            .queue_url(&stack.resources.queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    sqs.send_message()
        .queue_url(&stack.redrive_dlq_url)
        .message_body(job(&stack, "arch-raw", "x@courier.test"))
        .send()
        .await
        .unwrap();
    let driver = stack.driver(30);
    let index = DynamoDbLetterIndex::new(
        clients.dynamodb.clone(),
        &stack.resources.letter_index_table,
    );
    let mut indexed = Vec::new();
    for _ in 0..10 {
        driver.poll_once(&pipeline, "dl").await.unwrap();
        indexed = index
            .search(&LetterFilter::default(), 100, None)
            .await
            .unwrap()
            .0;
        if indexed.len() == 4 {
            break;
        }
    }
    assert_eq!(indexed.len(), 4, "every dead letter is searchable at once");
    let by_category = |c| LetterFilter {
        category: Some(c),
        ..LetterFilter::default()
    };
    assert_eq!(
        index
            .search(&by_category(DeadLetterCategory::NeedsReview), 100, None)
            .await
            .unwrap()
            .0
            .len(),
        2
    );
    let text = LetterFilter {
        text: Some("rejected by policy".into()),
        ..LetterFilter::default()
    };
    assert_eq!(index.search(&text, 100, None).await.unwrap().0.len(), 2);

    // Archive everything now (ages of zero), as a scheduled run would after the real ages.
    let archiver = stack.archiver_now();
    let report = archiver
        .run("it-run", chrono::Utc::now() + chrono::Duration::seconds(60))
        .await
        .unwrap();
    assert_eq!((report.archived, report.indexed_raw), (5, 1), "{report:?}");

    // The objects, read back, hold exactly the letters the index had, once each.
    let s3 = clients.s3.clone();
    let listed = s3
        .list_objects_v2()
        .bucket(&stack.archive_bucket)
        .send()
        .await
        .unwrap();
    let mut archived: BTreeMap<String, IndexedLetter> = BTreeMap::new();
    for object in listed.contents() {
        let key = object.key().unwrap();
        assert!(key.starts_with("dead-letters/category="), "{key}");
        let head = s3
            .head_object()
            .bucket(&stack.archive_bucket)
            .key(key)
            .send()
            .await
            .unwrap();
        assert!(
            head.server_side_encryption().is_some(),
            "{key} is not encrypted"
        );
        let bytes = s3
            .get_object()
            .bucket(&stack.archive_bucket)
            .key(key)
            .send()
            .await
            .unwrap()
            .body
            .collect()
            .await
            .unwrap()
            .into_bytes();
        for letter in courier_archiver::decode(&bytes).unwrap() {
            assert!(
                archived.insert(letter.letter_id.clone(), letter).is_none(),
                "archived twice"
            );
        }
    }
    assert_eq!(archived.len(), 5);
    for before in &indexed {
        let after = &archived[&before.letter_id];
        assert_eq!(
            after.record, before.record,
            "the archive holds the record as dead-lettered"
        );
    }
    let raw: Vec<&IndexedLetter> = archived
        .values()
        .filter(|l| l.record.category == DeadLetterCategory::Redriven)
        .collect();
    assert_eq!(raw[0].record.message_id.as_deref(), Some("arch-raw"));
    // The index says archived; the queues are empty; a second run finds nothing to do.
    let states: Vec<LetterState> = index
        .get_many(&archived.keys().cloned().collect::<Vec<_>>())
        .await
        .unwrap()
        .iter()
        .map(|l| l.state)
        .collect();
    assert!(
        states.iter().all(|s| *s == LetterState::Archived),
        "{states:?}"
    );
    let letters_queue = courier_adapters::aws::SqsLetterQueue::new(
        sqs.clone(),
        &stack.resources.dead_letter_queue_url,
    );
    assert!(
        letters_queue
            .receive(10, Duration::from_secs(1))
            .await
            .unwrap()
            .is_empty()
    );
    let again = archiver
        .run(
            "it-run-2",
            chrono::Utc::now() + chrono::Duration::seconds(60),
        )
        .await
        .unwrap();
    assert_eq!(again.archived, 0);
}

#[tokio::test]
async fn replay_and_discard_work_through_the_real_index_status_and_queue() {
    use courier_adapters::aws::DynamoDbPoisonList;
    let stack = Stack::create(&["smtp"]).await;
    let clients = Clients::new(&stack.sdk);
    let pipeline = stack.send_pipeline();
    let sqs = stack.sqs();
    let poison_body =
        job(&stack, "wb-poison", "policy@courier.test").replace("hello", "same payload every time");
    for body in [
        job(&stack, "wb-policy", "policy@courier.test"),
        poison_body.clone(),
    ] {
        sqs.send_message()
            .queue_url(&stack.resources.queue_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let driver = stack.driver(30);
    let index = DynamoDbLetterIndex::new(
        clients.dynamodb.clone(),
        &stack.resources.letter_index_table,
    );
    let mut letters = Vec::new();
    for _ in 0..10 {
        driver.poll_once(&pipeline, "wb").await.unwrap();
        letters = courierctl::workbench::select(
            &index,
            &LetterFilter {
                state: Some(LetterState::Live),
                ..LetterFilter::default()
            },
        )
        .await
        .unwrap();
        if letters.len() == 2 {
            break;
        }
    }
    assert_eq!(letters.len(), 2);
    let policy_letter: Vec<IndexedLetter> = letters
        .iter()
        .filter(|l| l.record.message_id.as_deref() == Some("wb-policy"))
        .cloned()
        .collect();
    let poison_letter: Vec<IndexedLetter> = letters
        .iter()
        .filter(|l| l.record.message_id.as_deref() == Some("wb-poison"))
        .cloned()
        .collect();

    // Replay: the job runs again as a new generation (and, still rejected, comes back as a new
    // letter); the replayed letter records who and why.
    let outcome = stack.replay_as_ann(&policy_letter, "retry after fix").await;
    assert_eq!(outcome.done.len(), 1, "{outcome:?}");
    let replayed = &index.get_many(&outcome.done).await.unwrap()[0];
    assert_eq!(replayed.state, LetterState::Replayed);
    // claimed (live -> replaying) before the job was touched, then marked
    assert!(replayed.audit[0].contains("replay started by ann: retry after fix"));
    assert!(replayed.audit[1].contains("replayed by ann: retry after fix"));
    let mut again = Vec::new();
    for _ in 0..10 {
        driver.poll_once(&pipeline, "wb2").await.unwrap();
        again = courierctl::workbench::select(
            &index,
            &LetterFilter {
                state: Some(LetterState::Live),
                ..LetterFilter::default()
            },
        )
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.record.message_id.as_deref() == Some("wb-policy"))
        .collect();
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(again.len(), 1);
    assert!(
        again[0].letter_id.contains("#g1#"),
        "a new generation: {}",
        again[0].letter_id
    );
    assert_eq!(
        again[0].record.history.len(),
        2,
        "the replayed attempt's history carries the first one: {:?} / replayed {:?}",
        again[0].record.history,
        replayed.record.history
    );

    // Discard with blocklist: an identical payload now goes straight to poison.
    let control = DynamoDbPoisonList::new(
        clients.dynamodb.clone(),
        &stack.resources.control_table,
        Duration::from_secs(0),
    );
    let outcome = courierctl::workbench::discard(
        &poison_letter,
        &index,
        Some(&control),
        "bob",
        "bad payload",
        chrono::Utc::now(),
        &mut Vec::new(),
    )
    .await
    .unwrap();
    assert_eq!(outcome.done.len(), 1);
    sqs.send_message()
        .queue_url(&stack.resources.queue_url)
        .message_body(poison_body)
        .send()
        .await
        .unwrap();
    let fresh = stack.send_pipeline();
    let mut poisoned = Vec::new();
    for _ in 0..10 {
        driver.poll_once(&fresh, "wb3").await.unwrap();
        poisoned = courierctl::workbench::select(
            &index,
            &LetterFilter {
                category: Some(DeadLetterCategory::Poison),
                ..LetterFilter::default()
            },
        )
        .await
        .unwrap();
        if !poisoned.is_empty() {
            break;
        }
    }
    assert_eq!(poisoned.len(), 1, "the blocklisted payload went to poison");
}

#[tokio::test]
async fn a_whole_queue_redrive_moves_every_message_back_where_the_emulator_has_it() {
    let stack = Stack::create(&["smtp"]).await;
    let sqs = stack.sqs();
    for i in 0..3 {
        sqs.send_message()
            .queue_url(&stack.redrive_dlq_url)
            .message_body(format!("raw-{i}"))
            .send()
            .await
            .unwrap();
    }
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&stack.redrive_dlq_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    let result =
        courier_adapters::aws::letters::redrive_all(&sqs, &arn, Some(&stack.queue_arn), 100).await;
    if courier_integration::emulator() == "moto" {
        // moto does not implement StartMessageMoveTask: the failure is reported, not hidden.
        let err = result.unwrap_err();
        assert!(err.to_string().contains("start message move task"), "{err}");
        return;
    }
    result.unwrap();
    let mut moved = Vec::new();
    for _ in 0..30 {
        moved.extend(
            stack
                .drain(&stack.resources.queue_url)
                .await
                .into_iter()
                .filter_map(|m| m.body),
        );
        if moved.len() == 3 {
            break;
        }
    }
    moved.sort();
    assert_eq!(moved, vec!["raw-0", "raw-1", "raw-2"]);
}
