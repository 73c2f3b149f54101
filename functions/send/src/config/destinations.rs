//! `COURIER_DESTINATION_*`: per-destination pacing (`courier_core::pacing`).

use courier_core::pacing::{DestinationPacing, PacingError};

use super::ConfigError;

/// `COURIER_DESTINATION_PACING` (`on`, the default, or `off`) and the rule's settings:
/// `COURIER_DESTINATION_RATE_FLOOR` and `_CEILING` (calls per second), `_INCREASE` (calls per
/// second added per minute without a throttle reply) and `_DECREASE` (the factor on a throttle
/// reply). `None`: receiving domains are not paced.
pub(super) fn destination_pacing(
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Option<DestinationPacing>, ConfigError> {
    match lookup("COURIER_DESTINATION_PACING")
        .as_deref()
        .map(str::trim)
    {
        None | Some("" | "on") => {}
        Some("off") => return Ok(None),
        Some(other) => {
            return Err(ConfigError::Invalid {
                name: "COURIER_DESTINATION_PACING",
                value: other.to_owned(),
                problem: "must be on or off".into(),
            });
        }
    }
    let number = |name: &'static str, default: f64| -> Result<f64, ConfigError> {
        match lookup(name).filter(|v| !v.trim().is_empty()) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| ConfigError::Invalid {
                name,
                value: v.clone(),
                problem: "must be a number".into(),
            }),
        }
    };
    let d = DestinationPacing::default();
    let rule = DestinationPacing {
        floor_per_sec: number("COURIER_DESTINATION_RATE_FLOOR", d.floor_per_sec)?,
        ceiling_per_sec: number("COURIER_DESTINATION_RATE_CEILING", d.ceiling_per_sec)?,
        increase_per_min: number("COURIER_DESTINATION_RATE_INCREASE", d.increase_per_min)?,
        decrease: number("COURIER_DESTINATION_RATE_DECREASE", d.decrease)?,
        hold: d.hold,
    };
    rule.validated().map(Some).map_err(|e| {
        let name = match e {
            PacingError::Bounds { .. } => "COURIER_DESTINATION_RATE_FLOOR",
            PacingError::Ceiling(_) => "COURIER_DESTINATION_RATE_CEILING",
            PacingError::Increase(_) => "COURIER_DESTINATION_RATE_INCREASE",
            PacingError::Decrease(_) | PacingError::Hold(_) => "COURIER_DESTINATION_RATE_DECREASE",
        };
        ConfigError::Invalid {
            name,
            value: lookup(name).unwrap_or_default(),
            problem: e.to_string(),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> Result<Option<DestinationPacing>, ConfigError> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        destination_pacing(&|k: &str| env.get(k).cloned())
    }

    #[test]
    fn on_by_default_with_the_default_rule() {
        assert_eq!(parse(&[]).unwrap(), Some(DestinationPacing::default()));
        assert_eq!(
            parse(&[("COURIER_DESTINATION_PACING", "on")]).unwrap(),
            Some(DestinationPacing::default())
        );
        assert_eq!(
            parse(&[("COURIER_DESTINATION_PACING", "off")]).unwrap(),
            None
        );
    }

    #[test]
    fn each_setting_is_read() {
        let rule = parse(&[
            ("COURIER_DESTINATION_RATE_FLOOR", "2"),
            ("COURIER_DESTINATION_RATE_CEILING", "40"),
            ("COURIER_DESTINATION_RATE_INCREASE", "3"),
            ("COURIER_DESTINATION_RATE_DECREASE", "0.5"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                rule.floor_per_sec,
                rule.ceiling_per_sec,
                rule.increase_per_min,
                rule.decrease
            ),
            (2.0, 40.0, 3.0, 0.5)
        );
    }

    #[test]
    fn a_bad_setting_names_its_variable() {
        for (name, value) in [
            ("COURIER_DESTINATION_PACING", "maybe"),
            ("COURIER_DESTINATION_RATE_FLOOR", "0"),
            ("COURIER_DESTINATION_RATE_FLOOR", "slow"),
            ("COURIER_DESTINATION_RATE_CEILING", "inf"),
            ("COURIER_DESTINATION_RATE_INCREASE", "-2"),
            ("COURIER_DESTINATION_RATE_DECREASE", "1.5"),
        ] {
            match parse(&[(name, value)]) {
                Err(ConfigError::Invalid { name: n, .. }) => assert_eq!(n, name, "{value}"),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }
}
