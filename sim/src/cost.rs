//! AWS calls the simulated pipeline makes, and what they cost.
//!
//! The counts follow the send function (`functions/send/src/lib.rs`) call for call, as counted
//! by `aws_api_calls_per_job` in `tests/tests/send.rs`:
//! - per batch: one `ReceiveMessage` and, if any record is acknowledged, one `DeleteMessageBatch`
//!   (both made by the event source mapping);
//! - per record: one claim `TransactWriteItems` (status put + suppression check);
//! - delivered: one `SendEmail` and one status `UpdateItem`;
//! - retried within 900 s: one `SendMessageBatch` per 10 re-enqueues of a batch and a status
//!   write; beyond 900 s: `StartExecution` and a status write, then the execution's state
//!   transitions and its `sqs:sendMessage`;
//! - dead-lettered: the letter index `PutItem`, the DLQ `SendMessage`, a status write;
//! - permanent bounce: the suppression `PutItem` and a status write;
//! - a failed record: the lease release (a status write); SQS redelivers it;
//! - breaker: a `GetItem` per instance per cache period when used, a read and a conditional
//!   write per batch that saw a failure (and per half-open probe result), a conditional write
//!   per probe admission;
//! - poison blocklist: one read per instance per cache period;
//! - per-destination pacing: a read of the domains' states per instance per cache period, a
//!   schedule reservation per send to a paced domain, a read and a conditional write per
//!   throttle reply that lowers a domain's pace;
//! - outcome events (`courier_core::outcome::relay`): per batch that wrote outcomes (sent,
//!   bounced, dead-lettered), one `BatchGetItem` of their records and one `PutEvents` per 10;
//!   per outcome, the conditional `UpdateItem` that clears its outbox. Outcomes of instances
//!   whose batches interleave are counted with the next batch to end (a slight undercount of
//!   the per-batch calls when many instances run at once).
//!
//! Prices: [`PRICES`], us-east-1 list prices (on-demand, no free tier) as of 2026-11.

use serde::Serialize;

/// Counted calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AwsCalls {
    pub sqs_receive: u64,
    /// Long polls that came back empty (idle pollers).
    pub sqs_receive_empty: u64,
    pub sqs_delete_batch: u64,
    /// `SendMessageBatch` of re-enqueues (up to 10 per call).
    pub sqs_send_batch: u64,
    /// Single `SendMessage`: to the DLQ, and the delay state machine's send back.
    pub sqs_send: u64,
    /// Claim transactions.
    pub ddb_claim: u64,
    /// Status writes (sent, deferred, terminal, lease release).
    pub ddb_status_write: u64,
    pub ddb_breaker_read: u64,
    pub ddb_breaker_write: u64,
    /// Send-rate schedule reservations (granted or refused: a conditional write either way).
    pub ddb_rate_write: u64,
    pub ddb_poison_read: u64,
    /// Reads of the receiving domains' pacing states (per instance per cache period, and one
    /// per throttle reply).
    pub ddb_pace_read: u64,
    pub ddb_letter_write: u64,
    pub ddb_suppression_write: u64,
    pub sfn_start: u64,
    pub sfn_transitions: u64,
    pub lambda_invocations: u64,
    /// Billed duration times memory, in GB-milliseconds.
    pub lambda_gb_ms: f64,
    /// Outcome events: `BatchGetItem`s of the records, `PutEvents` calls, entries published,
    /// and the outbox clears (`UpdateItem`).
    pub ddb_outcome_read: u64,
    pub events_put: u64,
    pub events_entries: u64,
    pub ddb_outbox_clear: u64,
    /// Calls to the provider (SES `SendEmail` or an SMTP session), whatever the answer.
    pub provider_calls: u64,
    /// Of which accepted (SES bills these).
    pub provider_accepted: u64,
}

impl AwsCalls {
    /// AWS API calls that scale with jobs (provider calls included, as the real count includes
    /// `SendEmail`); leaves out the per-instance periodic reads and empty polls.
    pub fn per_job_calls(&self) -> u64 {
        self.sqs_receive
            + self.sqs_delete_batch
            + self.sqs_send_batch
            + self.sqs_send
            + self.ddb_claim
            + self.ddb_status_write
            + self.ddb_breaker_write
            + self.ddb_rate_write
            + self.ddb_letter_write
            + self.ddb_suppression_write
            + self.sfn_start
            + self.ddb_outcome_read
            + self.events_put
            + self.ddb_outbox_clear
            + self.provider_calls
    }

    /// Reads every instance makes by the clock whatever its volume, and empty polls.
    pub fn periodic_calls(&self) -> u64 {
        self.ddb_breaker_read + self.ddb_poison_read + self.ddb_pace_read + self.sqs_receive_empty
    }
}

/// Unit prices in US dollars.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prices {
    /// Lambda arm64, per GB-second.
    pub lambda_gb_s: f64,
    /// Lambda, per request.
    pub lambda_request: f64,
    /// SQS standard, per request (each 64 KB chunk of a payload is one request; jobs are
    /// smaller than 64 KB).
    pub sqs_request: f64,
    /// DynamoDB on-demand, per write request unit.
    pub ddb_wru: f64,
    /// DynamoDB on-demand, per read request unit.
    pub ddb_rru: f64,
    /// Step Functions Standard, per state transition.
    pub sfn_transition: f64,
    /// SES, per message sent.
    pub ses_message: f64,
    /// EventBridge, per custom event published (each 64 KB chunk; outcome events are smaller).
    pub events_entry: f64,
}

/// us-east-1 list prices (Lambda arm64 $0.0000133334/GB-s and $0.20/M requests; SQS standard
/// $0.40/M requests; DynamoDB on-demand $0.625/M WRU and $0.125/M RRU; Step Functions Standard
/// $0.025/1,000 transitions; SES $0.10/1,000 messages; EventBridge $1.00/M custom events).
pub const PRICES: Prices = Prices {
    lambda_gb_s: 0.000_013_333_4,
    lambda_request: 0.20 / 1e6,
    sqs_request: 0.40 / 1e6,
    ddb_wru: 0.625 / 1e6,
    ddb_rru: 0.125 / 1e6,
    sfn_transition: 0.025 / 1e3,
    ses_message: 0.10 / 1e3,
    events_entry: 1.00 / 1e6,
};

/// Write units per call (items up to 1 KB cost 1 WRU; transactions cost 2 per item).
/// The claim is a transaction of two items (status put, suppression condition check): 4 WRU
/// (through SES the status item holds the job's body from the claim on: a body past 1 KB costs
/// more, not modelled here).
pub const CLAIM_WRU: u64 = 4;
/// A dead letter's index item holds the full record (a few KB): 4 WRU assumed.
pub const LETTER_WRU: u64 = 4;
/// State transitions per delay execution (Wait, Send, end).
pub const SFN_TRANSITIONS_PER_WAIT: u64 = 3;

/// The bill of one run, by service.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cost {
    pub lambda: f64,
    pub sqs: f64,
    pub dynamodb: f64,
    pub step_functions: f64,
    pub ses: f64,
    pub eventbridge: f64,
    pub total: f64,
}

impl Cost {
    pub fn of(calls: &AwsCalls, p: &Prices) -> Cost {
        let lambda = calls.lambda_gb_ms / 1000.0 * p.lambda_gb_s
            + calls.lambda_invocations as f64 * p.lambda_request;
        let sqs = (calls.sqs_receive
            + calls.sqs_receive_empty
            + calls.sqs_delete_batch
            + calls.sqs_send_batch
            + calls.sqs_send) as f64
            * p.sqs_request;
        let wru = calls.ddb_claim * CLAIM_WRU
            + calls.ddb_status_write
            + calls.ddb_breaker_write
            + calls.ddb_rate_write
            + calls.ddb_letter_write * LETTER_WRU
            + calls.ddb_suppression_write
            + calls.ddb_outbox_clear;
        // A consistent read of a record (under 4 KB) is one read unit.
        let rru = calls.ddb_breaker_read
            + calls.ddb_poison_read
            + calls.ddb_pace_read
            + calls.events_entries;
        let dynamodb = wru as f64 * p.ddb_wru + rru as f64 * p.ddb_rru;
        let step_functions = calls.sfn_transitions as f64 * p.sfn_transition;
        let ses = calls.provider_accepted as f64 * p.ses_message;
        let eventbridge = calls.events_entries as f64 * p.events_entry;
        Cost {
            lambda,
            sqs,
            dynamodb,
            step_functions,
            ses,
            eventbridge,
            total: lambda + sqs + dynamodb + step_functions + ses + eventbridge,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_million_first_attempt_deliveries_cost_what_the_price_table_says() {
        // GIVEN 1M jobs delivered at once in batches of 10, 300 ms per batch at 256 MB
        let calls = AwsCalls {
            sqs_receive: 100_000,
            sqs_delete_batch: 100_000,
            ddb_claim: 1_000_000,
            ddb_status_write: 1_000_000,
            lambda_invocations: 100_000,
            lambda_gb_ms: 100_000.0 * 300.0 * 0.25,
            provider_calls: 1_000_000,
            provider_accepted: 1_000_000,
            ..AwsCalls::default()
        };
        let c = Cost::of(&calls, &PRICES);
        // THEN SES dominates ($100), DynamoDB is 5 WRU a job ($3.125), SQS 0.2 requests a job
        assert!((c.ses - 100.0).abs() < 1e-9);
        assert!((c.dynamodb - 3.125).abs() < 1e-9);
        assert!((c.sqs - 0.08).abs() < 1e-9);
        assert!((c.lambda - (7_500.0 * 0.000_013_333_4 + 0.02)).abs() < 1e-9);
        assert_eq!(calls.per_job_calls(), 3_200_000);
    }
}
