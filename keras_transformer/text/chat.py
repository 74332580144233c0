"""Chat templates: a conversation rendered to the prompt text a checkpoint
was tuned on, by the Jinja template of its Hugging Face folder, as
`transformers`' `apply_chat_template(..., tokenize=False)` renders it.

Needs `jinja2` (`pip install "keras-transformer[chat]"`), imported on first
use. Templates come from checkpoint folders, so they run in Jinja's
sandbox, which refuses access to Python internals.
"""

import datetime
import functools
import json

import tensorflow as tf

from keras_transformer.text import checks

ROLE = "role"


def check_messages(messages):
    """`messages` as a list of dicts, each with a role (an assistant turn
    of tool calls may have no content), keys whose value is None left out
    (as transformers does); else a ValueError naming the message."""
    if isinstance(messages, dict) or not isinstance(messages, list | tuple):
        raise ValueError(
            "`messages` must be a list of dicts with a 'role' and a 'content'. "
            f"Received: messages={messages!r:.200}"
        )
    if not messages:
        raise ValueError("`messages` must hold at least one message. Received: []")
    checked = []
    for number, message in enumerate(messages):
        if not isinstance(message, dict) or ROLE not in message:
            raise ValueError(
                f"Each message must be a dict with a 'role'; "
                f"message {number} is not. Received: {message!r:.200}"
            )
        checked.append({k: v for k, v in message.items() if v is not None})
    return checked


def render(template, messages, add_generation_prompt=True, tokens=None, **kwargs):
    """The text of `messages` under the Jinja chat `template`.

    Args:
        template: the template text (a folder's `chat_template`).
        messages: a list of `{"role": ..., "content": ...}` dicts.
        add_generation_prompt: end with the header of an assistant turn.
        tokens: the special tokens the template sees by name (`bos_token`,
            `eos_token`, ...), transformers' `special_tokens_map`.
        **kwargs: more variables for the template (`tools`, `documents`,
            or a template's own); they override `tokens`.

    Returns:
        The rendered text (a `str`).

    Raises:
        ValueError: bad `messages`, no template, or messages the template
            refuses (`raise_exception`) or cannot read (a turn without the
            `content` it reads), as transformers refuses them.
    """
    messages = check_messages(messages)
    if not isinstance(template, str) or not template:
        raise ValueError(
            "This tokenizer has no chat template: its folder has none. "
            f"Received: chat_template={template!r}"
        )
    variables = {"tools": None, "documents": None, **(tokens or {}), **kwargs}
    compiled = _compile(template)
    import jinja2  # _compile imported it, or said how to install it

    try:
        return compiled.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **variables
        )
    except jinja2.UndefinedError as error:  # e.g. a turn without `content`
        raise ValueError(
            f"The chat template cannot render these messages: {error}. "
            f"Received: messages={checks.preview(messages, 3)}"
        ) from None


@functools.lru_cache(maxsize=16)
def _compile(template):
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as error:
        raise ImportError(
            "Chat templates need the `jinja2` package: "
            'pip install "keras-transformer[chat]"'
        ) from error

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (transformers marks the
        assistant's tokens with it): renders its body."""

        tags = {"generation"}

        def parse(self, parser):
            line = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(line)

        def _body(self, caller):
            return caller()

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[Generation, jinja2.ext.loopcontrols],
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = jinja2.pass_context(_raise)
    environment.globals["strftime_now"] = _strftime_now
    try:
        return environment.from_string(template)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(
            f"`chat_template` is not a valid Jinja template: {error}. "
            f"Received: chat_template={checks.preview([template], 1)}"
        ) from None


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own `tojson` escapes HTML characters; transformers' does not.
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


def _raise(context, message):
    """The template's `raise_exception(message)`; the error also shows the
    messages the template was given (not a `set` that replaced them)."""
    messages = context.parent.get("messages", context.get("messages"))
    if isinstance(messages, list | tuple):
        shown = checks.preview(messages, 3)
    else:
        shown = repr(messages)
    raise ValueError(
        f"The chat template refused the messages: {message} Received: messages={shown}"
    )


def _strftime_now(format):
    return datetime.datetime.now().strftime(format)


class ChatTemplateMixin:
    """`apply_chat_template` for a tokenizer with a `chat_template` (or
    None) and a `special_tokens_map` attribute.

    Example:

    >>> import keras_transformer as kt
    >>> bytes_ = kt.text.bytes_to_unicode().values()
    >>> tokenizer = kt.text.BytePairTokenizer(
    ...     {c: i for i, c in enumerate(bytes_)}, [],
    ...     chat_template="{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    ...     "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")
    >>> tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])
    '<user>hi<assistant>'
    """

    def apply_chat_template(self, messages, add_generation_prompt=True, **kwargs):
        """The prompt text of a conversation, rendered by this tokenizer's
        chat template exactly as transformers' `apply_chat_template(messages,
        tokenize=False, ...)` renders it.

        Args:
            messages: a list of `{"role": ..., "content": ...}` dicts.
            add_generation_prompt: end with the header of an assistant turn.
            **kwargs: more template variables (`tools`, `documents`, ...).

        Returns:
            A `str`. Tokenize it with `tokenize`; the template already
            writes any begin-of-text token, which `tokenize` adds again when
            it puts `bos_token` first (transformers tokenizes it with
            `add_special_tokens=False`).
        """
        return render(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            tokens=self.special_tokens_map,
            **kwargs,
        )

    def tokenize_chat(self, messages, add_generation_prompt=True, **kwargs):
        """The ids of `apply_chat_template`'s text, without `bos_token` and
        `eos_token` around it (the template writes its own), as
        transformers' `apply_chat_template(messages, tokenize=True)` gives
        them (plus one): a `(T,)` int32 tensor."""
        text = self.apply_chat_template(messages, add_generation_prompt, **kwargs)
        return self._tokenize(tf.constant([text]))[0]

    def _chat_config(self):
        """The chat entries of `get_config` (none when there is no template)."""
        if self.chat_template is None:
            return {}
        return {
            "chat_template": self.chat_template,
            "special_tokens_map": dict(self.special_tokens_map),
        }


def check_chat_template(chat_template, special_tokens_map):
    """`(chat_template, special_tokens_map)` checked: a string or None, and a
    dict of names to tokens (strings)."""
    if chat_template is not None and not isinstance(chat_template, str):
        raise ValueError(
            "`chat_template` must be a Jinja template (a string) or None. "
            f"Received: chat_template={chat_template!r:.80}"
        )
    tokens = dict(special_tokens_map or {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in tokens.items()):
        raise ValueError(
            "`special_tokens_map` must map names (such as 'eos_token') to tokens. "
            f"Received: special_tokens_map={special_tokens_map!r:.200}"
        )
    return chat_template, tokens
