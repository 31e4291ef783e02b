//! Tokenisation for the router: the model's tokenizer.json through the `tokenizers` crate and its
//! chat template through minijinja, with the semantics of the engine's Python path
//! (switchyard_tokenizer/tokenizer.py + pyrouter/http/parse.py), so the router and the engines agree on every
//! token id.

mod chat_template;
mod messages;
mod router_tokenizer;

pub use chat_template::ChatTemplate;
pub use messages::{parse_chat_messages, ChatMessage};
pub use router_tokenizer::RouterTokenizer;
