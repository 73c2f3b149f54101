//! Which templates each sender identity may use (`COURIER_SENDER_TEMPLATES`): a producer that may
//! send as `news.example.com` should not render the password-reset template as
//! `security@example.com`.
//!
//! The setting is `;`-separated entries `identity=pattern,pattern`: the identity an address,
//! a domain or `*` (any sender), each pattern a template id or a prefix ending in `*`
//! (`receipts/*`). A job's `from` is matched by its address first, then its domain, then `*`;
//! a sender matched by no entry may use no template. Jobs with inline content are not affected.

use std::collections::BTreeMap;

use crate::mailbox::{Identity, address_key};

/// The parsed allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderTemplates {
    by_identity: BTreeMap<Identity, Vec<String>>,
    any: Option<Vec<String>>,
}

impl SenderTemplates {
    /// Parses the setting; an entry without `=`, an identity that is neither an address nor a
    /// domain, an empty pattern or one with `*` elsewhere than at its end is an error naming it.
    pub fn parse(text: &str) -> Result<SenderTemplates, String> {
        let mut parsed = SenderTemplates {
            by_identity: BTreeMap::new(),
            any: None,
        };
        for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
            let (identity, patterns) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?} is not identity=template,template"))?;
            let patterns = patterns
                .split(',')
                .map(str::trim)
                .map(|p| {
                    let stem = p.strip_suffix('*').unwrap_or(p);
                    if p.is_empty() || stem.contains('*') {
                        Err(format!(
                            "{p:?} in {entry:?} is not a template id or a prefix ending in *"
                        ))
                    } else {
                        Ok(p.to_owned())
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            let identity = identity.trim();
            let slot = if identity == "*" {
                parsed.any.get_or_insert_with(Vec::new)
            } else {
                parsed
                    .by_identity
                    .entry(Identity::parse(identity)?)
                    .or_default()
            };
            slot.extend(patterns);
        }
        if parsed.by_identity.is_empty() && parsed.any.is_none() {
            return Err("no entry: identity=template,template;...".into());
        }
        Ok(parsed)
    }

    /// Whether a job from `from` may render template `id`.
    pub fn allows(&self, from: &str, id: &str) -> bool {
        let key = address_key(from);
        let domain = key.rsplit_once('@').map(|(_, d)| d.to_owned());
        let patterns = self
            .by_identity
            .get(&Identity::Address(key.clone()))
            .or_else(|| {
                domain
                    .as_ref()
                    .and_then(|d| self.by_identity.get(&Identity::Domain(d.clone())))
            })
            .or(self.any.as_ref());
        patterns.is_some_and(|patterns| {
            patterns.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => id.starts_with(prefix),
                None => p == id,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sender_renders_only_its_templates() {
        let t = SenderTemplates::parse(
            "security@example.com=password-reset; example.com=receipts/*, welcome; *=newsletter/*",
        )
        .unwrap();
        // The address's own entry wins over its domain's.
        assert!(t.allows("Security <security@example.com>", "password-reset"));
        assert!(!t.allows("security@example.com", "welcome"));
        // The domain's entry, prefixes and exact ids.
        assert!(t.allows("shop@example.com", "receipts/2026/order"));
        assert!(t.allows("SHOP@EXAMPLE.COM", "welcome"));
        assert!(!t.allows("shop@example.com", "welcome-back"));
        assert!(!t.allows("shop@example.com", "password-reset"));
        // Any other sender: the * entry only.
        assert!(t.allows("news@other.example", "newsletter/weekly"));
        assert!(!t.allows("news@other.example", "password-reset"));
        // Without a * entry, an unlisted sender may use no template.
        let strict = SenderTemplates::parse("example.com=welcome").unwrap();
        assert!(!strict.allows("x@other.example", "welcome"));
    }

    #[test]
    fn a_setting_that_cannot_be_read_says_which_entry() {
        for (text, names) in [
            ("example.com", "\"example.com\""),
            ("example.com=", "\"\""),
            ("example.com=re*ceipts", "re*ceipts"),
            ("not an identity=welcome", "not an identity"),
            (" ; ", "no entry"),
        ] {
            let e = SenderTemplates::parse(text).unwrap_err();
            assert!(e.contains(names), "{text}: {e}");
        }
    }
}
