//! AWS limits that the send path must stay within, each as AWS documents it, and the pure
//! splitting that keeps requests inside them.

use std::ops::Range;

/// Entries in one SQS `SendMessageBatch` (AWS: "up to 10 messages").
pub const SQS_BATCH_ENTRIES: usize = 10;

/// The largest SQS message, and the largest total of one `SendMessageBatch` (AWS, SendMessageBatch:
/// "The maximum allowed individual message size and the maximum total payload size (the sum of
/// the individual lengths of all of the batched messages) are both 1 MiB 1,048,576 bytes").
/// The template sets every queue's `MaximumMessageSize` to it.
pub const SQS_MAX_BYTES: usize = 1_048_576;

/// The largest Step Functions execution input (AWS, Step Functions quotas: "Maximum input or
/// output size for a task, state, or execution: 256 KiB of data as a UTF-8 encoded string").
pub const SFN_MAX_INPUT_BYTES: usize = 262_144;

/// Splits messages of `sizes` bytes, in order, into `SendMessageBatch` calls: at most
/// [`SQS_BATCH_ENTRIES`] each, and at most [`SQS_MAX_BYTES`] in total. A message larger than
/// the limit on its own gets a batch of its own, so only it fails.
pub fn sqs_batches(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut batches = Vec::new();
    let (mut start, mut total) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        let full = i - start == SQS_BATCH_ENTRIES || total + size > SQS_MAX_BYTES;
        if i > start && full {
            batches.push(start..i);
            (start, total) = (i, 0);
        }
        total += size;
    }
    if start < sizes.len() {
        batches.push(start..sizes.len());
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_hold_ten_messages_at_most() {
        assert_eq!(sqs_batches(&[1; 23]), vec![0..10, 10..20, 20..23]);
        assert!(sqs_batches(&[]).is_empty());
    }

    #[test]
    fn batches_hold_one_mebibyte_at_most() {
        let k = 1024;
        // Four 300 KiB bodies: three fit in 1 MiB, the fourth starts the next batch.
        assert_eq!(sqs_batches(&[300 * k; 4]), vec![0..3, 3..4]);
        // Exactly the limit fits; one byte more does not.
        assert_eq!(sqs_batches(&[512 * k, 512 * k]), vec![0..2]);
        assert_eq!(sqs_batches(&[512 * k, 512 * k + 1]), vec![0..1, 1..2]);
        // An oversized message is alone, and its neighbours batch as usual.
        assert_eq!(
            sqs_batches(&[10, SQS_MAX_BYTES + 1, 10, 10]),
            vec![0..1, 1..2, 2..4]
        );
    }

    #[test]
    fn every_message_is_in_exactly_one_batch_in_order() {
        let sizes: Vec<usize> = (0..200).map(|i| (i * 7919) % 400_000).collect();
        let batches = sqs_batches(&sizes);
        let flat: Vec<usize> = batches.iter().flat_map(Clone::clone).collect();
        assert_eq!(flat, (0..200).collect::<Vec<_>>());
        for b in batches {
            assert!(b.len() <= SQS_BATCH_ENTRIES);
            let total: usize = sizes[b.clone()].iter().sum();
            assert!(total <= SQS_MAX_BYTES || b.len() == 1);
        }
    }
}
