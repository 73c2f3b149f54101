//! The trace id that follows a job everywhere: the producer's `trace_id`, or else the root of
//! the AWS X-Ray trace header a producer sent with the message (SQS's `AWSTraceHeader` system
//! attribute), kept in every later copy of the job.

/// The root trace id of an X-Ray trace header (`Root=1-5759e988-bd862e3fe1be46a994272793;
/// Parent=...;Sampled=1`), when it is well formed: `1-`, 8 hex digits, `-`, 24 hex digits.
pub fn xray_root(header: &str) -> Option<String> {
    let root = header
        .split(';')
        .find_map(|part| part.trim().strip_prefix("Root="))?;
    let mut parts = root.split('-');
    let well_formed = parts.next() == Some("1")
        && parts.next().is_some_and(|t| t.len() == 8 && is_hex(t))
        && parts.next().is_some_and(|r| r.len() == 24 && is_hex(r))
        && parts.next().is_none();
    well_formed.then(|| root.to_owned())
}

fn is_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_of_a_well_formed_header_is_the_trace() {
        assert_eq!(
            xray_root("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
                .as_deref(),
            Some("1-5759e988-bd862e3fe1be46a994272793")
        );
        assert_eq!(
            xray_root("Sampled=0; Root=1-5759e988-bd862e3fe1be46a994272793").as_deref(),
            Some("1-5759e988-bd862e3fe1be46a994272793")
        );
    }

    #[test]
    fn anything_else_is_no_trace() {
        for header in [
            "",
            "Parent=53995c3f42cd8ad8",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-5759e98-bd862e3fe1be46a994272793",
            "Root=1-5759e988-bd862e3fe1be46a99427279z",
            "Root=1-5759e988-bd862e3fe1be46a994272793-extra",
            "Root=1-5759e988-bd862e3fe1be46a994272793\r\nX: y",
        ] {
            assert_eq!(xray_root(header), None, "{header:?}");
        }
    }
}
