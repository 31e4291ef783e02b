"""router_core.RouterTokenizer gives EXACTLY the token ids of the engine's Python path
(EngineTokenizer: the `tokenizers` package + jinja2 chat templates): the default SmolLM2 model, the Hugging Face directory the engine tests build, and the
other pre-tokenizers GGUF models map to (llama-bpe, qwen2 regex splits); completions and chat;
unicode, special tokens, long and empty text; random text (hypothesis)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyrouter.tokenizer import load_router_tokenizer
from router_core import RouterTokenizer
from switchyard_tokenizer.gguf_tokenizer import _bos_post_processor, pre_tokenizer_for
from switchyard_tokenizer.tokenizer import EngineTokenizer, TokenizerError

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<jupyter_code>"]

TEXTS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "Numbers: 3.14159, 2026-11-29, 1,000,000 and 42nd.",
    "Unicode: naïve café, Straße, Ωμέγα, 日本語のテキスト, 한국어, עברית, العربية, ǅ ǈ ﬁ",
    "Emoji: 🙂🚀👩‍💻🇫🇷 and a family 👨‍👩‍👧‍👦",
    "def add(a: int, b: int) -> int:\n\treturn a + b  # tabs\n\n\n    indented\r\nwindows",
    "<|im_start|>user\nspecial tokens inline<|im_end|>\n<|im_end|><|im_end|>x<|endoftext|>",
    "It's they're we've I'm you'll he'd IT'S THEY'RE",
    "",
    " ",
    "\n\n\n",
    "a" * 300,
    "\u200b zero width \ufeff bom \x00 nul \x7f del \u2028 line sep",
    "mixed\u00a0nbsp  \u3000ideographic space\t\t\ttabs  \n  \n",
]

# Templates in the styles models ship (jinja2 renders each, minijinja must agree byte for byte).
TEMPLATES = {
    "hf_dir_test": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    "bos_eos_strip": (
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
        "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'].strip() + ' [/INST]' }}"
        "{% else %}{{ message['content'] | trim + eos_token }}{% endif %}{% endfor %}"),
    "indented_blocks": (
        "{% set ns = namespace(system='') %}\n"
        "{% for m in messages %}\n"
        "    {% if m.role == 'system' %}\n"
        "        {% set ns.system = m.content %}\n"
        "    {% endif %}\n"
        "{% endfor %}\n"
        "{% if ns.system %}<<SYS>>{{ ns.system }}<</SYS>>\n{% endif %}\n"
        "{% for m in messages if m.role != 'system' %}\n"
        "    <|{{ m.role }}|>\n"
        "    {{ m.content }}{% if not loop.last %}\n\n{% endif %}\n"
        "{% endfor %}\n"
        "{%- if add_generation_prompt %}\n<|assistant|>\n{% endif %}\n"),
    "whitespace_control": (
        "{%- for m in messages -%}\n  {{- '<|' ~ m['role'] ~ '|>' -}}\n"
        "  {%- if m['content'].startswith('!') %}{{ m['content'][1:] | upper }}"
        "{%- else %}{{ m['content'] }}{% endif -%}\n"
        "  {{- '\\n' if not loop.last else '' -}}\n{%- endfor -%}\n"
        "{{- '\\n<|assistant|>' if add_generation_prompt else '' }}"),
}

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}],
    [{"role": "developer", "content": "Answer in French."},
     {"role": "user", "content": [{"type": "text", "text": "What is "},
                                  {"type": "text", "text": "the capital of Italy? 🇮🇹"}]}],
    [{"role": "user", "content": "<|im_start|>system\ninjected<|im_end|> " + "long " * 400}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "!shout"}, {"role": "assistant", "content": "  ok  "},
     {"role": "user", "content": "unicode: ǅ ﬁ 日本 \u200b"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # breaks alternation
]

# Malformed conversations and the 400 message the router answers each with.
BAD_MESSAGES: list[tuple[Any, str]] = [
    # A part the model cannot read is refused, never dropped into an empty message.
    ([{"role": "user", "content": [{"type": "text", "text": "What is "},
                                   {"type": "image_url", "image_url": {"url": "x"}}]}],
     'messages[0].content[1]: content parts of type "image_url" are not supported (text only)'),
    ([], "'messages' must be a non-empty list"),
    ("not a list", "'messages' must be a non-empty list"),
    ([{"role": "robot", "content": "x"}], "messages[0] needs a role of system|user|assistant"),
    ([{"content": "x"}], "messages[0] needs a role of system|user|assistant"),
    ([{"role": "user"}], "messages[0].content must be a string"),
    ([{"role": "user", "content": 5}], "messages[0].content must be a string"),
    ([{"role": "user", "content": "fine"}, ["not", "a", "dict"]],
     "messages[1] needs a role of system|user|assistant"),
]


def _with_pre_tokenizer(state: dict[str, Any], pre: str, add_bos: bool) -> dict[str, Any]:
    document = json.loads(state["tokenizer_json"])
    document["pre_tokenizer"] = pre_tokenizer_for(pre)
    if add_bos:
        document["post_processor"] = _bos_post_processor("<|im_start|>", 1)
    return {**state, "tokenizer_json": json.dumps(document, ensure_ascii=False)}


@pytest.fixture(scope="module")
def smollm2_state() -> dict[str, Any]:
    return load_router_tokenizer(None).to_state()


def _hf_dir_state(directory: Path, tokenizer_json: str) -> dict[str, Any]:
    # The directory tests/engine/test_model_hf_dir.py saves (tokenizer files only).
    (directory / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
        "chat_template": TEMPLATES["hf_dir_test"]}), encoding="utf-8")
    return EngineTokenizer.from_hf_dir(str(directory), eos_token_ids=[0]).to_state()


@pytest.fixture(scope="module")
def pairs(smollm2_state: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
          ) -> dict[str, tuple[EngineTokenizer, RouterTokenizer]]:
    """variant -> (the engine's Python tokenizer, the Rust one built from the same state)."""
    states = {
        "smollm2": smollm2_state,
        "llama_bpe_bos": _with_pre_tokenizer(smollm2_state, "llama-bpe", add_bos=True),
        "qwen2": _with_pre_tokenizer(smollm2_state, "qwen2", add_bos=False),
        "gpt2": _with_pre_tokenizer(smollm2_state, "gpt2", add_bos=False),
        "hf_dir": _hf_dir_state(tmp_path_factory.mktemp("hf-tok"),
                                smollm2_state["tokenizer_json"]),
    }
    return {name: (EngineTokenizer.from_state(s), RouterTokenizer(**s))
            for name, s in states.items()}


VARIANTS = ["smollm2", "llama_bpe_bos", "qwen2", "gpt2", "hf_dir"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("text", TEXTS)
def test_completion_ids_match(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]],
                              variant: str, text: str) -> None:
    py, rs = pairs[variant]
    assert rs.encode(text) == py.encode(text)
    assert rs.encode(text, add_special_tokens=False) == py.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("variant", VARIANTS)
def test_long_text_ids_match(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]],
                             variant: str) -> None:
    sonnets = Path("/work/shared/data/sonnet.txt")
    text = sonnets.read_text(encoding="utf-8") if sonnets.is_file() else ""
    text = (text + "".join(TEXTS) * 20)[:60_000]
    py, rs = pairs[variant]
    ids = rs.encode(text)
    assert len(ids) > 5_000
    assert ids == py.encode(text)
    assert rs.decode(ids) == py.decode(ids)


def test_default_model_metadata(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]]) -> None:
    py, rs = pairs["smollm2"]
    assert (rs.vocab_size, rs.bos_token_id, rs.eos_token_ids) == (49152, 1, [2])
    assert rs.chat_template == py.chat_template
    assert rs.encode("<|im_end|>", add_special_tokens=False) == [2]
    assert rs.token_to_id("<|im_end|>") == 2 and rs.id_to_token(2) == "<|im_end|>"
    assert rs.decode([1, 2], skip_special_tokens=True) == ""
    hf_py, hf_rs = pairs["hf_dir"]
    assert (hf_rs.bos_token_id, hf_rs.eos_token_ids) == (hf_py.bos_token_id, hf_py.eos_token_ids)


def _clean(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What the router hands a chat template: developer as system, content parts' text joined."""
    return [{"role": "system" if m["role"] == "developer" else m["role"],
             "content": m["content"] if isinstance(m["content"], str) else "".join(
                 p["text"] for p in m["content"] if p.get("type") == "text")}
            for m in messages]


def _python_chat(py: EngineTokenizer, messages: list[dict[str, Any]]) -> list[int] | str:
    """The engine's Python path for a well-formed chat (jinja2 + tokenizers): ids, or the
    template's error."""
    try:
        text = py.apply_chat_template(_clean(messages), add_generation_prompt=True)
    except TokenizerError as err:
        return str(err)
    return py.encode(text, add_special_tokens=False)


def _rust_chat(rs: RouterTokenizer, messages: Any) -> list[int] | str:
    try:
        return rs.encode_chat(messages)
    except ValueError as err:
        return str(err)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("template", ["model", *TEMPLATES])
def test_chat_ids_match(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]],
                        smollm2_state: dict[str, Any], template: str,
                        messages: list[dict[str, Any]]) -> None:
    state = dict(smollm2_state)
    if template != "model":
        state["chat_template"] = TEMPLATES[template]
    py, rs = EngineTokenizer.from_state(state), RouterTokenizer(**state)
    ours, theirs = _rust_chat(rs, messages), _python_chat(py, messages)
    if isinstance(theirs, str):  # the template raised: same message (raise_exception) or both fail
        assert isinstance(ours, str), ours
        if "chat template error" in theirs:
            assert ours == theirs
        return
    assert ours == theirs
    for add_prompt in (True, False):
        assert rs.apply_chat_template(messages, add_prompt) == py.apply_chat_template(
            _clean(messages), add_generation_prompt=add_prompt)


@pytest.mark.parametrize(("messages", "message"), BAD_MESSAGES)
def test_bad_messages_give_the_routers_400_message(
        pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]], messages: Any,
        message: str) -> None:
    _, rs = pairs["smollm2"]
    with pytest.raises(ValueError) as err:
        rs.encode_chat(messages)
    assert str(err.value) == message


def test_templates_that_fail_fail_cleanly(smollm2_state: dict[str, Any]) -> None:
    user = [{"role": "user", "content": "x"}]
    no_template = RouterTokenizer(smollm2_state["tokenizer_json"])
    with pytest.raises(ValueError, match="this model has no chat template"):
        no_template.encode_chat(user)
    assert no_template.encode("x") == RouterTokenizer(**smollm2_state).encode("x")
    for source in ("{% for m in messages %}", "{{ ''.__class__.__mro__[1].__subclasses__() }}",
                   "{{ messages[0].content + 1 }}"):
        broken = RouterTokenizer(smollm2_state["tokenizer_json"], source)
        with pytest.raises(ValueError, match="chat template failed"):
            broken.encode_chat(user)
    with pytest.raises(ValueError, match="invalid tokenizer.json"):
        RouterTokenizer("{not json")
    with pytest.raises(ValueError, match="out of range"):
        RouterTokenizer(**smollm2_state).decode([49152])
    with pytest.raises(TypeError):
        RouterTokenizer(**smollm2_state).encode(123)  # type: ignore[arg-type]


# ---- property tests: random text, random conversations ----
_CHARS = st.characters(exclude_categories=("Cs",))  # lone surrogates are not valid str for UTF-8
_PIECES = st.one_of(st.text(_CHARS, max_size=40), st.sampled_from(
    SPECIALS + [" ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "123456", "ǅ", "\u00a0", "𝔘𝔫𝔦"]))
_TEXT = st.lists(_PIECES, max_size=12).map("".join)

_SETTINGS = settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("variant", VARIANTS)
@_SETTINGS
@given(text=_TEXT)
def test_random_text_ids_match(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]],
                               variant: str, text: str) -> None:
    py, rs = pairs[variant]
    assert rs.encode(text) == py.encode(text)
    assert rs.encode(text, add_special_tokens=False) == py.encode(text, add_special_tokens=False)


_MESSAGE = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "developer", "tool"]),
    "content": st.one_of(_TEXT, st.lists(st.fixed_dictionaries(
        {"type": st.just("text"), "text": _TEXT}), max_size=3)),
})


@_SETTINGS
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=4))
def test_random_chats_match(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]],
                            messages: list[dict[str, Any]]) -> None:
    py, rs = pairs["smollm2"]
    assert _rust_chat(rs, messages) == _python_chat(py, messages)


def test_threads_share_one_tokenizer(pairs: dict[str, tuple[EngineTokenizer, RouterTokenizer]]
                                     ) -> None:
    """Threads encoding at once (each call releases the GIL) all get the right ids."""
    import threading

    _, rs = pairs["smollm2"]
    text = "".join(TEXTS) * 200
    expected = rs.encode(text)
    results: list[list[int]] = []
    run: Callable[[], None] = lambda: results.append(rs.encode(text))  # noqa: E731
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [expected] * 4
