//! Rendering with a strict engine: a variable the template uses but the job lacks is a
//! rendering failure, never an empty string.

use minijinja::{Environment, UndefinedBehavior};

use crate::job::{Content, EmailJob, JobError};
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
    #[error("rendered message is invalid: {0}")]
    Invalid(#[from] JobError),
}

/// Renders a stored template with the job's variables into content, validated like inline
/// content (no CR/LF in the subject, size limits).
pub fn render(
    template_id: &str,
    template: &Template,
    variables: &serde_json::Map<String, serde_json::Value>,
) -> Result<Content, RenderError> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
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
            env.render_str(source, ctx.clone())
                .map_err(|source| RenderError::Engine {
                    template: template_id.to_owned(),
                    part: name,
                    source,
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
