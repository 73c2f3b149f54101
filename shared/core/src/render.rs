//! Rendering with a strict engine: a variable the template uses but the job lacks is a
//! rendering failure, never an empty string.

use minijinja::{Environment, UndefinedBehavior};

use crate::job::{Content, EmailJob, JobError, MAX_BODY_BYTES};
use crate::ports::Template;

/// Why rendering failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("template {template:?} part {part}: {source}")]
    Engine {
        template: String,
        part: &'static str,
        #[source]
        source: minijinja::Error,
    },
    #[error("template {template:?} part {part}: the rendered part passes {max} bytes")]
    TooLarge {
        template: String,
        part: &'static str,
        max: usize,
    },
    #[error("rendered message is invalid: {0}")]
    Invalid(#[from] JobError),
}

/// The work one template part may do: about this many engine instructions, or `n * 64` bytes
/// of values (MiniJinja's fuel). A loop over a few hundred items uses a few thousand; a template
/// that would spin or build huge values stops here instead of exhausting a 128 MB function.
pub const FUEL: u64 = 100_000;

/// How deep macros and includes may nest (MiniJinja's default is 500).
pub const RECURSION_LIMIT: usize = 64;

/// The largest rendered part: the body limit (the whole message is checked again after).
pub const MAX_RENDERED_BYTES: usize = MAX_BODY_BYTES;

/// A writer that refuses output past [`MAX_RENDERED_BYTES`], so a template's output never grows
/// past it in memory.
#[derive(Default)]
struct Bounded {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("the rendered part is too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Renders a stored template with the job's variables into content, validated like inline
/// content (no CR/LF in the subject, size limits). Each part runs with [`FUEL`],
/// [`RECURSION_LIMIT`] and [`MAX_RENDERED_BYTES`]; passing one is a rendering failure.
pub fn render(
    template_id: &str,
    template: &Template,
    variables: &serde_json::Map<String, serde_json::Value>,
) -> Result<Content, RenderError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.set_recursion_limit(RECURSION_LIMIT);
    let ctx = minijinja::Value::from(minijinja::value::Serde(variables));
    let part =
        |name: &'static str, source: &str, auto_escape: bool| -> Result<String, RenderError> {
            let mut env = env.clone();
            env.set_auto_escape_callback(move |_| {
                if auto_escape {
                    minijinja::AutoEscape::Html
                } else {
                    minijinja::AutoEscape::None
                }
            });
            let engine = |source| RenderError::Engine {
                template: template_id.to_owned(),
                part: name,
                source,
            };
            let mut out = Bounded::default();
            let rendered = env
                .template_from_str(source)
                .and_then(|t| t.render_captured_to(ctx.clone(), &mut out).map(|_| ()));
            if out.overflowed {
                return Err(RenderError::TooLarge {
                    template: template_id.to_owned(),
                    part: name,
                    max: MAX_RENDERED_BYTES,
                });
            }
            rendered.map_err(engine)?;
            String::from_utf8(out.bytes).map_err(|e| {
                engine(minijinja::Error::new(
                    minijinja::ErrorKind::BadSerialization,
                    e.to_string(),
                ))
            })
        };
    let content = Content {
        subject: part("subject", &template.subject, false)?.trim().to_owned(),
        text: template
            .text
            .as_deref()
            .map(|t| part("text", t, false))
            .transpose()?,
        html: template
            .html
            .as_deref()
            .map(|t| part("html", t, true))
            .transpose()?,
    };
    content.validate()?;
    Ok(content)
}

/// The job's content: inline as is, or rendered from its template.
pub fn content_of(job: &EmailJob, template: Option<&Template>) -> Result<Content, RenderError> {
    match (&job.content, &job.template, template) {
        (Some(content), _, _) => Ok(content.clone()),
        (None, Some(t), Some(stored)) => render(&t.id, stored, &t.variables),
        _ => Err(RenderError::Invalid(JobError::TemplateXorContent {
            found: "neither",
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tpl() -> Template {
        Template {
            subject: "Hello {{ name }}".into(),
            text: Some("Items: {% for i in items %}{{ i }} {% endfor %}".into()),
            html: Some("<p>{{ name }}</p>".into()),
        }
    }

    #[test]
    fn renders_and_escapes_html_only() {
        let vars = json!({"name": "<Ann>", "items": ["a", "b"]});
        let c = render("t", &tpl(), vars.as_object().unwrap()).unwrap();
        assert_eq!(c.subject, "Hello <Ann>");
        assert_eq!(c.text.as_deref(), Some("Items: a b "));
        assert_eq!(c.html.as_deref(), Some("<p>&lt;Ann&gt;</p>"));
    }

    #[test]
    fn a_missing_variable_is_a_failure_not_an_empty_string() {
        let vars = json!({"items": []});
        let err = render("t", &tpl(), vars.as_object().unwrap()).unwrap_err();
        assert!(err.to_string().contains("subject"), "{err}");
    }

    fn amplified(text: &str) -> Template {
        Template {
            subject: "Hi".into(),
            text: Some(text.into()),
            html: None,
        }
    }

    #[test]
    fn a_template_that_would_spin_or_grow_without_bound_fails_its_record_only() {
        let vars = json!({"word": "x".repeat(1_000)});
        let vars = vars.as_object().unwrap();
        // A loop of a billion iterations runs out of fuel.
        let spin = amplified("{% for i in range(1000000000) %}{{ i }}{% endfor %}");
        let err = render("spin", &spin, vars).unwrap_err();
        assert!(matches!(err, RenderError::Engine { .. }), "{err}");
        // Output past the body limit is refused while it is written.
        let grow = amplified("{% for i in range(2000) %}{{ word }}{% endfor %}");
        let err = render("grow", &grow, vars).unwrap_err();
        assert!(matches!(err, RenderError::TooLarge { .. }), "{err}");
        // A macro calling itself stops at the recursion limit.
        let deep = amplified("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}");
        assert!(render("deep", &deep, vars).is_err());
        // An ordinary loop over a few hundred items is well within the limits.
        let items: Vec<u32> = (0..500).collect();
        let fine = amplified("{% for i in items %}{{ i }},{% endfor %}");
        let ok = render("fine", &fine, json!({"items": items}).as_object().unwrap()).unwrap();
        assert!(ok.text.unwrap().starts_with("0,1,2,"));
    }

    #[test]
    fn syntax_errors_and_injected_subjects_fail() {
        let bad = Template {
            subject: "{% if %}".into(),
            text: Some("x".into()),
            html: None,
        };
        assert!(render("t", &bad, &serde_json::Map::new()).is_err());
        let vars = json!({"name": "x\r\nBcc: evil@example.com", "items": []});
        let err = render("t", &tpl(), vars.as_object().unwrap()).unwrap_err();
        assert!(
            matches!(err, RenderError::Invalid(JobError::ControlCharacter { .. })),
            "{err}"
        );
    }
}
