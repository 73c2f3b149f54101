//! Reading a captured message's header fields (a Maildir file, the raw MIME moto's SES kept):
//! the evidence the chaos suite and the demo count by `X-Courier-Message-Id`.

/// The value of the first header field `name` (any case) in `message`'s header block, which
/// ends at the first empty line; folded lines are unfolded (RFC 5322 2.2.3: each line break
/// before whitespace is removed). `None` when the field is absent.
pub fn header(message: &str, name: &str) -> Option<String> {
    let mut found: Option<String> = None;
    for line in message.lines() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(value) = found.as_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
            continue;
        }
        if found.is_some() {
            break;
        }
        if let Some((field, value)) = line.split_once(':')
            && field.trim().eq_ignore_ascii_case(name)
        {
            found = Some(value.trim().to_owned());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::header;

    #[test]
    fn fields_are_found_in_any_case_unfolded_and_only_in_the_header_block() {
        let message = "From: a@x\r\nSubject: Your order\r\n\tof Tuesday\r\n  is on its way\r\n\
            x-courier-message-id: m-1\r\n\r\nX-Courier-Campaign-Id: in the body\r\n";
        assert_eq!(
            header(message, "Subject").as_deref(),
            Some("Your order of Tuesday is on its way")
        );
        assert_eq!(
            header(message, "X-Courier-Message-Id").as_deref(),
            Some("m-1")
        );
        assert_eq!(header(message, "X-Courier-Campaign-Id"), None);
        // LF line ends (a Maildir file) read the same; the first of two fields wins.
        let maildir = "X-Courier-Message-Id: first\nX-Courier-Message-Id: second\n\nbody";
        assert_eq!(
            header(maildir, "x-courier-message-id").as_deref(),
            Some("first")
        );
        assert_eq!(header("", "Subject"), None);
    }
}
