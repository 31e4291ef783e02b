//! A model's chat template rendered with minijinja, configured like the engine's sandboxed jinja2
//! environment (switchyard_tokenizer/tokenizer.py): `trim_blocks`, `lstrip_blocks`, no trailing newline kept,
//! no autoescaping, a `raise_exception(message)` global, and Python's string/dict/list methods
//! (`.strip()`, `.items()`, ...) through minijinja-contrib's pycompat. Templates ship inside model
//! files; minijinja gives them no access to anything but the values passed in.

use super::messages::ChatMessage;
use crate::error::{Result, RouterCoreError};
use minijinja::syntax::SyntaxConfig;
use minijinja::{context, Environment, Error, ErrorKind, Value};
use std::fmt;

const TEMPLATE_NAME: &str = "chat_template";

/// The error `raise_exception` attaches, so a render failure it caused reads as the template's
/// own message (as the Python tokenizer reports it).
#[derive(Debug)]
struct RaisedByTemplate(String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

fn raise_exception(message: String) -> std::result::Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, "raise_exception")
        .with_source(RaisedByTemplate(message)))
}

/// A compiled chat template. A template minijinja cannot compile is kept as its error, reported
/// on every render (a tokenizer without a usable template still encodes completions).
pub struct ChatTemplate {
    env: std::result::Result<Environment<'static>, String>,
}

impl ChatTemplate {
    pub fn new(source: &str) -> Self {
        ChatTemplate {
            env: compile(source).map_err(|err| describe(&err)),
        }
    }

    /// Whether the template compiled.
    pub fn is_valid(&self) -> bool {
        self.env.is_ok()
    }

    /// The prompt text for `messages`, as the engine's `apply_chat_template` renders it.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<String> {
        let env = self
            .env
            .as_ref()
            .map_err(|err| RouterCoreError::ChatTemplate(format!("chat template failed: {err}")))?;
        let template = env
            .get_template(TEMPLATE_NAME)
            .map_err(|err| RouterCoreError::ChatTemplate(format!("chat template failed: {err}")))?;
        template
            .render(context! {
                messages => messages_value(messages),
                add_generation_prompt => add_generation_prompt,
                bos_token => bos_token,
                eos_token => eos_token,
            })
            .map_err(|err| match raised_message(&err) {
                Some(message) => {
                    RouterCoreError::ChatTemplate(format!("chat template error: {message}"))
                }
                None => RouterCoreError::ChatTemplate(format!(
                    "chat template failed: {}",
                    describe(&err)
                )),
            })
    }
}

/// Each message as a `{"role", "content"}` map, the shape templates index (`m['role']`, `m.content`).
fn messages_value(messages: &[ChatMessage]) -> Value {
    messages
        .iter()
        .map(|m| {
            Value::from_pairs([
                ("role", Value::from(m.role.as_str())),
                ("content", Value::from(m.content.as_str())),
            ])
        })
        .collect()
}

fn compile(source: &str) -> std::result::Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    let mut syntax = SyntaxConfig::builder();
    syntax
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false);
    env.set_syntax(syntax.build()?);
    // jinja2's Environment does not autoescape; minijinja would for names ending in .html.
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_template_owned(TEMPLATE_NAME, source.to_owned())?;
    Ok(env)
}

fn raised_message(err: &Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(current) = source {
        if let Some(raised) = current.downcast_ref::<RaisedByTemplate>() {
            return Some(raised.0.clone());
        }
        source = current.source();
    }
    None
}

/// minijinja's error plus its source chain, on one line.
fn describe(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(current) = source {
        text.push_str(": ");
        text.push_str(&current.to_string());
        source = current.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(text: &str) -> Vec<ChatMessage> {
        vec![ChatMessage::new("user", text)]
    }

    fn render(source: &str, messages: &[ChatMessage]) -> Result<String> {
        ChatTemplate::new(source).render(messages, true, "<s>", "</s>")
    }

    #[test]
    fn trims_blocks_and_strips_their_indentation() {
        let source = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[{{ m.content }}]\n    {% endif %}\n{% endfor %}\n";
        assert_eq!(render(source, &user("hi")).unwrap(), "[hi]\n");
    }

    #[test]
    fn generation_prompt_and_special_token_strings() {
        let source = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] + eos_token }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
        let template = ChatTemplate::new(source);
        let messages = user("x");
        assert_eq!(
            template.render(&messages, true, "<s>", "</s>").unwrap(),
            "<s><|user|>x</s><|assistant|>"
        );
        assert_eq!(
            template.render(&messages, false, "", "").unwrap(),
            "<|user|>x"
        );
    }

    #[test]
    fn python_string_methods_and_loop_state() {
        let source = "{% for m in messages %}{{ m.content.strip().upper() }}{% if not loop.last %},{% endif %}{% endfor %}";
        let messages = vec![
            ChatMessage::new("user", "  a "),
            ChatMessage::new("user", "b"),
        ];
        assert_eq!(render(source, &messages).unwrap(), "A,B");
    }

    #[test]
    fn no_html_escaping() {
        assert_eq!(
            render("{{ messages[0].content }}", &user("<&>'\"")).unwrap(),
            "<&>'\""
        );
    }

    #[test]
    fn raise_exception_reports_the_template_message() {
        let err = render("{{ raise_exception('only user turns') }}", &user("x")).unwrap_err();
        assert_eq!(
            err,
            RouterCoreError::ChatTemplate("chat template error: only user turns".into())
        );
    }

    #[test]
    fn broken_or_hostile_templates_are_errors() {
        let broken = ChatTemplate::new("{% for m in messages %}");
        assert!(!broken.is_valid());
        assert!(matches!(
            broken.render(&user("x"), true, "", ""),
            Err(RouterCoreError::ChatTemplate(_))
        ));
        let hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }}";
        assert!(matches!(
            render(hostile, &user("x")),
            Err(RouterCoreError::ChatTemplate(_))
        ));
    }
}
