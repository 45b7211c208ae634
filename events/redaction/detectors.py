"""The secret shapes redaction looks for in free text, and how each is told from harmless text.

Every detector is a regular expression, the literals one of which any match contains (so text
without them skips the expression: most text costs a few substring checks), which part of a
match is replaced, and an optional check that rejects look-alikes ("a basic understanding" is
not ``Basic`` credentials: those are base64 of ``user:password``). The families:

* **tokens with a known prefix**, one whitespace-free run each: OpenAI/Anthropic ``sk-``,
  Stripe, GitHub, GitLab, Slack (and its webhooks), Google, SendGrid, npm, PyPI, Hugging Face,
  Twilio, reel's own API and admin tokens, AWS access key ids, JWTs, URL userinfo passwords,
  and bare AWS secret access keys (40 base64 characters that look random); hundreds more come
  from gitleaks' rules (:mod:`events.redaction.vendor_rules`);
* **key blocks**: PEM (any ``... PRIVATE KEY``, encrypted or not), PGP, SSH2, OpenVPN static
  keys and PuTTY ``.ppk`` files, from the BEGIN line to their END line, or to the end of the
  text when it has none; minisign/signify secret keys;
* **key and value**: a key that names a secret, in English (``password``, ``DB_PASSWORD``,
  ``DBPASSWORD``, ``SECRET_KEY``, ``api-key``, ``client_secret``, ``token``...) or in another
  language (:data:`LOCAL_PASSWORD_WORDS`), followed by a separator and a value, quoted,
  JSON-escaped or bare; prose forms (``my password is hunter2``, ``密码是hunter2``) when the
  value looks like a credential; YAML block scalars, XML elements and attributes, SQL
  ``IDENTIFIED BY``, ``.netrc``; the ``Authorization``, ``Bearer`` and ``Basic`` forms when the
  credential looks like one; ``Cookie:`` headers that carry ``name=value`` pairs;
* **command lines**: ``--password X`` and kin, ``-u user:pw``, and the short flags that take a
  password after the programs that use them so (``mysql -pX``, ``sshpass -p X``...).

The key is kept, the value replaced. Placeholders and code are not secrets:
``${DB_PASSWORD}``, ``${{ secrets.X }}``, ``{{ vault_password }}``, ``<your token>``,
``********``, ``getpass()``, ``os.environ["TOKEN"]`` stay as they are; so do generic keys
(``token``, ``secret``) with a value that reads as prose (``token: the smallest unit``).
docs/redaction.md lists what is not detected and why.

:attr:`Detector.trigger` and :data:`REACH` serve streaming redaction
(:mod:`events.redaction.redact_stream`): a match that spans whitespace starts in the
whitespace-free run of one of its detector's trigger words and ends within ``REACH`` characters of
it, except a key block, which ends at its END line (:attr:`Detector.end`).
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

MARKER = "[REDACTED]"


class Expression(NamedTuple):
    """A regular expression's source and flags, compiled on first use (:meth:`compiled`): a
    process compiles only the detectors its texts need (about 250 expressions, most of them
    the vendor rules, cost a third of a second of pure Python all at once)."""

    source: str
    flags: int = 0

    def compiled(self) -> re.Pattern[str]:
        """The compiled expression (once per process: the compile is cached)."""
        return _compiled(self.source, self.flags)


@cache
def _compiled(source: str, flags: int) -> re.Pattern[str]:
    return re.compile(source, flags)


class Detector(NamedTuple):
    """One secret shape."""

    name: str
    expression: Expression
    hints: tuple[str, ...]
    """Lower-cased literals, one of which every match contains; empty: always run."""
    groups: tuple[str | int, ...] = ()
    """Groups, the first that matched something is the span replaced; empty: the whole match."""
    accept: Callable[[re.Match[str], str], bool] | None = None
    """Rejects a look-alike, given the match and the replaced part."""
    case_hints: tuple[str, ...] = ()
    """Literals checked as they are (not lower-cased): AWS key id prefixes."""
    min_length: int = 0
    """Texts shorter than this cannot match (the hint-less bare AWS key)."""
    multiline: bool = False
    """A block (private keys): may run past REACH; it ends at its END line."""
    anchor: Expression | None = None
    """A fast expression (lower-case literals, run on the lower-cased text) for a word every
    match contains: the detector's own expression is then tried only at the starts of the
    ``[A-Za-z0-9_.-]`` run around each anchor (the key of a pair), not at every position."""
    ends_at_line_end: bool = False
    """A match may hold spaces and runs to the end of its line (headers, key and value):
    streaming that gives up holding one swallows input up to the next line break, not the next
    space (see :mod:`events.redaction.redact_stream`)."""
    trigger: tuple[str, ...] = ()
    """Lower-case words one of which starts every match that can hold whitespace (or lies
    inside its first whitespace-free run): streaming holds text after them (see REACH)."""
    run: int = 0
    """Every match holds a run of at least this many characters of ``[A-Za-z0-9_.~+/=-]``
    (0: not known): text without such a run skips the detector (the vendor rules)."""
    end: Expression | None = None
    """For a ``multiline`` block: what ends it (its END line); streaming waits for it."""
    continues: bool = False
    """A match may go on at the next line (a YAML block scalar's next indented line): streaming
    holds it while only whitespace follows it, not only while it reaches the end."""
    overlaps: bool = False
    """A match runs from a word to its value across a gap (a program's name, then its flag)
    where another match can start: the search goes on one character after a match's start,
    not after its end (``zip data/ mysql -pX shop zip -P Y``: the gap of the second ``zip``'s
    match holds ``mysql -pX``)."""

    @property
    def pattern(self) -> re.Pattern[str]:
        """The detector's expression, compiled (on first use: see :class:`Expression`)."""
        return self.expression.compiled()


# --- checks ---------------------------------------------------------------------------------

_TRAILING = ".,;:!?)]}>"
_STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "below",
        "above",
        "by",
        "changed",
        "correct",
        "empty",
        "for",
        "here",
        "in",
        "incorrect",
        "invalid",
        "is",
        "it",
        "missing",
        "must",
        "my",
        "none",
        "not",
        "null",
        "of",
        "on",
        "optional",
        "or",
        "required",
        "reset",
        "same",
        "see",
        "set",
        "should",
        "the",
        "this",
        "that",
        "to",
        "too",
        "wrong",
        "your",
        "you",
        "yours",
        # type annotations: ``def login(password: str)``
        "str",
        "string",
        "bytes",
        "int",
        "bool",
        "any",
        "secretstr",
    )
)
_PLACEHOLDER = Expression(
    r"""
    \$\{?[A-Za-z_][A-Za-z0-9_]*\}?      # ${DB_PASSWORD}, $TOKEN
    | \$\{\{.* | \$\(.* | %[A-Za-z_]\w*%  # ${{ secrets.X }}, $(cat file), %PASSWORD%
    | your[_-][\w-]* | [\w-]*[_-]here | replace[_-]?me  # YOUR_TOKEN, api-key-here, REPLACE_ME
    | \{\{.* | \{%.* | \{[A-Za-z_][\w.]*\}  # {{ vault_password }}, {password}
    | <[^>]*>? | \*+ | x{3,} | X{3,} | \.\.\.  # <your token>, ****, xxx, ...
    | %\([A-Za-z_]\w*\)s | [:@%][A-Za-z_]\w*      # %(password)s, :password, @token
    | (?:none|null|nil|true|false|undefined)
    """,
    re.VERBOSE | re.IGNORECASE,
)
_CODE = re.compile(r"[A-Za-z_][\w.]*(?:\(|\[).*|(?:self|this|os|process|env|config)\.[\w.]+")


def credential_like(value: str) -> bool:
    """Whether a value reads as a credential rather than a word: at least 6 characters, and a
    digit, a symbol inside it, or a capital letter after the first character."""
    value = value.rstrip(_TRAILING)
    if len(value) < 6 or value.lower() in _STOPWORDS:
        return False
    if any(c.isdigit() for c in value):
        return True
    if any(not c.isalnum() for c in value[1:-1]):
        return True
    return any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)


def _placeholder_or_code(value: str, key: str) -> bool:
    if value == MARKER or MARKER in value:
        return True
    if _PLACEHOLDER.compiled().fullmatch(value) or _CODE.fullmatch(value):
        return True
    # ``password = password``, ``token=api_token``, ``ERRORTOKEN = token.ERRORTOKEN``: a
    # variable, not a value
    names = value.split(".")
    if not all(n.isidentifier() for n in names):
        return False
    last, key = names[-1].lower().strip("_"), key.lower().strip("_")
    return last in key or (bool(key) and key in last.split("_"))  # getpass = unix_getpass


def _accept_bearer(match: re.Match[str], value: str) -> bool:
    return credential_like(value)


def _accept_basic(match: re.Match[str], value: str) -> bool:
    """Basic credentials are base64 of ``user:password``."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded


def _accept_authorization(match: re.Match[str], value: str) -> bool:
    return MARKER not in value and credential_like(value.split()[-1])


_WORDLIKE = re.compile(r"[A-Z]?[a-z]{3,}")


def _accept_aws_secret(match: re.Match[str], value: str) -> bool:
    """40 base64 characters that look random: upper, lower and digits, at least 20 distinct
    characters, at most 20 letters in word-like runs. Keeps git hashes (hex), paths and long
    identifiers; catches ~99% of random keys (docs/redaction.md)."""
    if not (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    ):
        return False
    if len(set(value)) < 20:
        return False
    return sum(len(w) for w in _WORDLIKE.findall(value)) <= 20


# --- key and value --------------------------------------------------------------------------


def _variants(*words: str) -> str:
    """An alternation of ``words`` as written, NFC and NFD (an Indic or Vietnamese word may come
    composed or not), longest first."""
    forms = {unicodedata.normalize(f, w) for w in words for f in ("NFC", "NFD")}
    return "|".join(re.escape(w) for w in sorted(forms, key=len, reverse=True))


LOCAL_PASSWORD_WORDS = (
    "密码",  # Mandarin (simplified)
    "密碼",  # Mandarin (traditional)
    "口令",  # Mandarin (a pass phrase)
    "contraseña",  # Spanish
    "contrasena",
    "पासवर्ड",  # Hindi
    "कूटशब्द",  # Hindi
    "كلمة المرور",  # Arabic
    "كلمة السر",  # Arabic
    "mot de passe",  # French
    "পাসওয়ার্ড",  # Bengali
    "senha",  # Portuguese
    "пароль",  # Russian, Ukrainian
    "پاس ورڈ",  # Urdu
    "kata sandi",  # Indonesian
    "kata laluan",  # Malay
    "passwort",  # German
    "kennwort",  # German
    "パスワード",  # Japanese
    "暗証番号",  # Japanese (a PIN)
    "비밀번호",  # Korean
    "mật khẩu",  # Vietnamese
    "şifre",  # Turkish
    "hasło",  # Polish
    "wachtwoord",  # Dutch
    "lösenord",  # Swedish
    "adgangskode",  # Danish
    "passord",  # Norwegian
    "salasana",  # Finnish
    "jelszó",  # Hungarian
    "heslo",  # Czech, Slovak
    "κωδικός πρόσβασης",  # Greek
    "סיסמה",  # Hebrew
    "رمز عبور",  # Persian
    "รหัสผ่าน",  # Thai
    "கடவுச்சொல்",  # Tamil
    "nenosiri",  # Swahili
)
"""The word for password in other languages (the ten most spoken and more): a key in any of
them names a secret."""

_LOCAL = _variants(*LOCAL_PASSWORD_WORDS)
_STRONG_WORDS = (
    r"password|passwd|passphrase|pwd|api[_-]?key|apikey|"
    r"(?:access|refresh|auth|session|id|bearer|private)[_-]?token|"
    r"(?:access|private|secret|encryption|signing|master)[_-]?key|client[_-]key[_-]data|"
    r"client[_-]?secret"
)
_WEAK_WORDS = r"secret|token|credentials?"
_VAGUE_WORDS = r"auth|pass|parola"
"""Words that name a secret only sometimes (``SERVER_AUTH``, ``boarding pass``, Italian
``parola``): their value must look like a credential, quoted or not."""
_GLUED = r"(?P<glue>[A-Za-z0-9]{1,24}?(?=password|passwd|passphrase|secret|token|api_?key|pass))?"
"""A name glued in front (``DBPASSWORD``, ``githubtoken``): for these words only, so ``bypass``
or ``oauth`` are not read as keys."""


def _key(strong: str, weak: str = _WEAK_WORDS, vague: str = _VAGUE_WORDS) -> str:
    return (
        r"(?<![A-Za-z0-9])(?P<key>(?:[A-Za-z0-9]{1,32}[_.-]){0,6}" + _GLUED + r""
        r"(?:(?P<strong>" + strong + r")|(?P<weak>" + weak + r")"
        r"|(?P<vague>" + vague + r"))"
        r"(?:[_-](?:access[_-])?key|[_-]value)?)(?![A-Za-z0-9])"
    )


_KEY = _key(_STRONG_WORDS + "|" + _LOCAL)
"""A key that names a secret, in any language."""
_NOT_CJK = "\u3000-\u30ff\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef"
_QUOTED_VALUE = (
    # "value" / 'value' (JSON escapes inside), \"value\" (JSON inside a JSON string), and a
    # quote left open to the end of its line (output cut short, or still streaming).
    r"\\{1,31}\"(?P<eq>(?:[^\"\\\r\n]|\\\\[^\"\r\n]){1,200})\\{1,31}\""
    r"|\"(?P<dq>(?:[^\"\\\r\n]|\\[^\"\r\n]){1,200})\""
    r"|'(?P<sq>[^'\\\r\n]{1,200})'"
    r"|\\{0,31}(?P<oq>[\"'])(?P<open>(?:(?!(?P=oq))[^\\\r\n]|\\[^\r\n]|\\(?=[\r\n]|\Z)){1,200})"
    r"(?=[\r\n]|\Z)"
)
_BARE_VALUE = r"(?P<bare>[^\s\"'&,;}\]\\\u3000-\u303f\uff0c\uff1b]+)"
_PROSE_VERB = (
    r"(?:[ \t]{1,4}(?:is|was|es|era|est|ist|war|é|är|jest|adalah|là)[ \t]{1,4}"
    r"|[ \t]{0,2}(?:是|为|為|は|が)[ \t]{0,2})"
)


def _pair(key: str) -> Expression:
    """``key = value`` (every separator and quoting) or, in prose, ``key is value``."""
    return Expression(
        key + r"(?P<sep>\\{0,31}[\"']?[ \t]{0,4}(?::=|=>|[:=\uff1a\uff1d])[ \t]{0,4})"
        r"(?:" + _QUOTED_VALUE + "|" + _BARE_VALUE + r")"
        r"|"
        + key.replace("?P<key>", "?P<key2>")
        .replace("?P<strong>", "?P<strong2>")
        # prose: "my password is hunter2", "la contraseña es hunter2", "密码是hunter2"
        .replace("?P<weak>", "?P<weak2>")
        .replace("?P<vague>", "?P<vague2>")
        .replace("?P<glue>", "?P<glue2>")
        + _PROSE_VERB
        + r"(?P<said>[^\s\"'`"
        + _NOT_CJK
        + r"]{0,200}[^\s\"'`.,;:!?)"
        + _NOT_CJK
        + r"])",
        re.IGNORECASE,
    )


_PAIR_VALUES = ("eq", "dq", "sq", "open", "bare", "said")
_KEY_WITH_SEP = Expression(_KEY + r"[ \t]{0,4}(?::=|=>|[:=\uff1a\uff1d])", re.IGNORECASE)
"""A bare "value" that starts a secret's key and its separator (``password: DB_PASSWORD: x``,
``пароль: كلمة المرور: x``): not the value, so the match is refused and the scan finds the pair
that starts there."""
_PATH = re.compile(r"(?:~|\.{1,2})?/[\w./-]*")
_BLOCK_INDICATOR = re.compile(r"[|>][-+0-9]*")
_NUMBERING = re.compile(r"[\d.]+")
"""Digits and dots: a version or an OID (``SERVER_AUTH = '1.3.6.1.5.5.7.3.1'``)."""
_KEY_ALONE = Expression(_KEY, re.IGNORECASE)


def is_placeholder(value: str) -> bool:
    """Whether ``value`` stands for a secret rather than being one (``${{ secrets.X }}``,
    ``<your token>``, ``****``)."""
    return _PLACEHOLDER.compiled().fullmatch(value.strip()) is not None


def secret_pair(key: str, value: str) -> bool:
    """Whether ``key`` names a secret and ``value`` is one, as a quoted value after that key
    would be judged in text (for a mapping's entries, which are read apart from their keys)."""
    lowered = key.lower()
    if lowered.isascii() and not any(w in lowered for w in PAIR_WORDS):
        return False  # most keys: no word of a secret's key in them
    match = _KEY_ALONE.compiled().fullmatch(key.strip())
    if match is None or not value.strip() or _placeholder_or_code(value.strip(), key):
        return False
    if match.group("vague") is not None or (match.group("weak") and match.group("glue")):
        # SERVER_AUTH = '1.3.6.1', "nextPageToken": "CAUQAA": only a credential's look counts
        return credential_like(value) and not _NUMBERING.fullmatch(value)
    return True


def _accept_pair(match: re.Match[str], value: str) -> bool:
    key = match.group("key") or match.group("key2")
    if _placeholder_or_code(value, key):
        return False
    opened = match.group("open")
    if opened is not None and any(c in opened for c in "\"'\\"):
        # A quote left open whose text holds a quote or an escape: matched so that a stream
        # holds it while it arrives (_QUOTED_VALUE), a secret only in the plain form
        # (``'pass': 'The "pass" statement\n'`` is documentation).
        return False
    if match.group("said") is not None:  # prose
        return credential_like(value)
    sep = match.group("sep")
    if match.group("bare") is not None and _KEY_WITH_SEP.compiled().match(
        match.string, match.start("bare")
    ):
        return False
    if _BLOCK_INDICATOR.fullmatch(value):
        return False  # "password: |": a YAML block follows (yaml_block judges it)
    if _PATH.fullmatch(value):
        return False  # PWD=/home/app, --from-file=password=./pw.txt: a file, not its content
    if match.group("vague") is not None or (match.group("weak") and match.group("glue")):
        # SERVER_AUTH = '1.3.6.1', "nextPageToken": "CAUQAA": only a credential's look counts
        return credential_like(value) and not _NUMBERING.fullmatch(value)
    if match.group("bare") is not None:
        if match.group("weak") is not None:  # token: the smallest unit
            return credential_like(value)
        if sep.rstrip() != sep and ":" in sep:  # "password: it must be..."
            return value.rstrip(_TRAILING).lower() not in _STOPWORDS
    return True


PAIR_WORDS = ("passw", "passphrase", "pwd", "pass", "auth", "secret", "token", "credential", "key")
"""Literals one of which every key of an English pair contains (lower-cased)."""
LOCAL_WORDS = (
    "parola",
    *dict.fromkeys(
        unicodedata.normalize(form, w.lower())
        for w in LOCAL_PASSWORD_WORDS
        for form in ("NFC", "NFD")
    ),
)
"""The same for the other languages, composed and not (``lösenord`` as ``o`` and a combining
diaeresis: the expressions hold both forms, so their literals must)."""


_Trie = dict[str, "_Trie"]


def trie(words: set[str]) -> str:
    """An expression matching any of ``words``, shaped as a trie (``p(?:ass(?:w|phrase)|wd)``):
    Python's engine tries a flat alternation word by word at every position, a trie one
    character at a time, so two hundred words cost about what ten do."""
    tree: _Trie = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: _Trie) -> str:
        branches = [re.escape(c) + emit(sub) for c, sub in sorted(node.items()) if c]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return "(?:" + body + ")?" if "" in node else body

    return emit(tree)


def _anchor(words: tuple[str, ...]) -> Expression:
    return Expression(trie(set(words)))


def _secret_value(match: re.Match[str], value: str, weak: bool) -> bool:
    """A value after a flag or in markup: not a placeholder nor code; unquoted, or after a weak
    word (``token``, ``secret``), it must also look like a credential."""
    value = value.strip()
    if not value or _placeholder_or_code(value, ""):
        return False
    if weak or not any(g in match.groupdict() and match.group(g) for g in ("q1", "q2")):
        return credential_like(value)
    return value.lower() not in _STOPWORDS


# --- command lines --------------------------------------------------------------------------

_FLAG_STRONG = r"password|passwd|passphrase|pwd|api-?key|apikey|storepass|keypass|client-secret"
_FLAG_WEAK = r"pass|token|secret"
_FLAG = Expression(
    r"(?<![\w-])--?(?:[a-z0-9]{1,16}-){0,4}(?:(?P<strong>" + _FLAG_STRONG + r")|(?P<weak>"
    r"" + _FLAG_WEAK + r"))(?![\w-])(?:[ \t]{0,8}=[ \t]{0,8}|[ \t]{1,8})"
    r"(?:\"(?P<q1>[^\"\r\n]{1,200})\"|'(?P<q2>[^'\r\n]{1,200})'|(?P<v>[^\s\"'-][^\s\"']*))",
    re.IGNORECASE,
)


def _accept_flag(match: re.Match[str], value: str) -> bool:
    """``--password X``: X quoted, or it looks like a credential (``--password to set it``
    is prose); ``--token X`` and ``--secret X`` always need the look."""
    return _secret_value(match, value, weak=match.group("weak") is not None)


_CMD_GAP = r"[^\n;|&]{0,160}?"
"""From a program's name to one of its flags: the same command (no line break, ``;``, ``|``)."""
_CLI_SHORT = Expression(
    r"\bsshpass\b" + _CMD_GAP + r"(?<![\w-])-p[ \t]{0,8}(?P<a>[^\s-]\S*)"
    r"|\b(?:docker|podman|nerdctl|buildah|skopeo|oras|helm[ \t]{1,8}registry)[ \t]{1,8}login\b"
    + _CMD_GAP
    + r"(?<![\w-])-p[ \t]{1,8}(?P<b>[^\s-]\S*)"
    r"|\b(?:mysql\w{0,32}|mariadb[\w-]{0,32})\b" + _CMD_GAP + r"(?<![\w-])-p(?P<c>[^\s-]\S*)"
    r"|\bredis-cli\b" + _CMD_GAP + r"(?<![\w-])-a[ \t]{1,8}(?P<d>[^\s-]\S*)"
    r"|\b(?:zip|unzip)\b" + _CMD_GAP + r"(?<![\w-])-P[ \t]{1,8}(?P<e>[^\s-]\S*)"
    r"|\b(?:7z|7za|7zr|rar|unrar)\b" + _CMD_GAP + r"(?<![\w-])-p(?P<f>[^\s-]\S*)"
    r"|\b(?:mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport)\b"
    + _CMD_GAP
    + r"(?<![\w-])-p[ \t]{1,8}(?P<g>[^\s-]\S*)"
    r"|\b(?:sqlcmd|bcp|osql|isql)\b" + _CMD_GAP + r"(?<![\w-])-P[ \t]{0,8}(?P<h>[^\s-]\S*)"
    r"|\bldap\w{1,32}\b" + _CMD_GAP + r"(?<![\w-])-w[ \t]{1,8}(?P<i>[^\s-]\S*)"
    r"|\b(?:smbclient|rpcclient|smbmap|smbget)\b" + _CMD_GAP + r"(?<![\w-])(?:-U|--user)"
    r"(?:[ \t]{1,8}|=)[^\s%]{1,64}%(?P<j>\S+)"
    r"|\b\w{0,32}freerdp\b" + _CMD_GAP + r"[/-]p:(?P<k>\S+)"
    r"|\bhtpasswd\b(?:[ \t]{1,4}-\w{1,8}){0,3}?[ \t]{1,4}-\w{0,8}b\w{0,8}"
    r"(?:[ \t]{1,4}-\w{1,8}){0,3}[ \t]{1,4}\S{1,100}[ \t]{1,4}\S{1,64}[ \t]{1,4}(?P<l>\S+)"
    r"|(?<![\w-])-pass(?:in|out)?[ \t]{1,8}pass:(?P<m>\S+)"
)
"""Short flags that take a password, only after the programs that use them that way (``-p``
is a port to ssh and docker run, a pipe to unzip)."""
CLI_COMMANDS = (
    "sshpass",
    "docker",
    "podman",
    "nerdctl",
    "buildah",
    "skopeo",
    "oras",
    "helm",
    "mysql",
    "mariadb",
    "redis-cli",
    "zip",
    "7z",
    "rar",
    "mongo",
    "sqlcmd",
    "bcp",
    "osql",
    "isql",
    "ldap",
    "smbclient",
    "rpcclient",
    "smbmap",
    "smbget",
    "freerdp",
    "htpasswd",
    "-pass",
)
_USER_PASSWORD = Expression(
    r"(?<![\w-])(?:-u|--user|--proxy-user)(?:[ \t]{0,8}=[ \t]{0,8}|[ \t]{1,8})"
    # "user:pass word" or user:'pass word': the whole credential, quotes and all, as
    # gitleaks' curl-auth-user rule replaces it (a stream may see only this rule: curl can be
    # far before its -u)
    r"(?:(?P<q>\"(?P<qu>[^\s:\"/@]{1,64}):[^\"\r\n]{1,200}\""
    r"|'(?P<su>[^\s:'/@]{1,64}):[^'\r\n]{1,200}')"
    r"|(?P<w>(?P<wu>[^\s:\"'/@]{1,64}):(?:\"[^\"\r\n]{1,200}\"|'[^'\r\n]{1,200}'))"
    r"|[\"']?(?P<user>[^\s:\"'/@]{1,64}):(?P<v>[^\s\"']+))"
)


def _accept_user_password(match: re.Match[str], value: str) -> bool:
    """``-u user:password``; not ``-u 1000:1000`` (a uid and gid), nor a placeholder."""
    user = next(u for u in match.group("qu", "su", "wu", "user") if u is not None)
    secret = value if match.group("v") is not None else value.partition(":")[2]
    secret = secret.strip("\"'")  # of a quoted credential (``"user:pass"``, ``user:'pass'``)
    if user.isdigit() and secret.isdigit():
        return False
    return not _placeholder_or_code(secret, "")


# --- other syntaxes ---------------------------------------------------------------------------

_XML_WORD = (
    r"(?:[\w:.-]{0,40}?(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|apikey|"
    r"credentials?|access[_-]?key|private[_-]?key|client[_-]?secret|" + _LOCAL + r")s?)"
)
_XML = Expression(
    r"<(?P<tag>" + _XML_WORD + r")(?:[ \t][^<>]{0,200})?>"
    r"(?:(?P<q1>[^<]{1,200})</(?P=tag)[ \t]{0,8}>|(?P<q3>[^<]{1,200})(?:</?[^<>]{0,70})?\Z)"
    r"|\"" + _XML_WORD + r"\"[ \t]{1,8}value[ \t]{0,8}=[ \t]{0,8}\"(?P<q2>[^\"\r\n]{1,200})\""
    r"|\"" + _XML_WORD + r"\"[^<>\r\n]{0,100}?>(?P<v>[^<\r\n]{1,200})(?:<|\Z)",
    re.IGNORECASE,
)
"""``<password>x</password>``, ``<add key="DbPassword" value="x"/>``, ``<entry
key="db.password">x</entry>``; an element still open at the end of the text (``q3``, and ``v``
without its ``<``) matches so that a stream holds it while it arrives, and is refused as a secret
(:func:`_accept_xml`)."""


_XML_STRONG = Expression(r"passw|passphrase|pwd|key|" + _LOCAL, re.IGNORECASE)


def _accept_xml(match: re.Match[str], value: str) -> bool:
    if match.group("q3") is not None or (
        match.group("v") is not None and not match.group().endswith("<")
    ):
        # Open at the end of the text: matched so that a stream holds it while it arrives,
        # never a secret by itself (``postgres://<user>:<password>@host``, ``(?P<token>…)``,
        # ``echo "password" > file`` end so).
        return False
    text = match.group()
    weak = _XML_STRONG.compiled().search(text) is None
    return _secret_value(match, value, weak=weak)


_SQL = Expression(
    r"\bidentified[ \t]{1,8}by(?:[ \t]{1,8}password)?[ \t]{1,8}(?:'(?P<a>[^'\r\n]{1,200})'"
    r"|\"(?P<b>[^\"\r\n]{1,200})\")"
    r"|(?<=with[ \t])(?:encrypted[ \t]{1,8})?password[ \t]{1,8}'(?P<c>[^'\r\n]{1,200})'"
    r"|(?<=encrypted[ \t])password[ \t]{1,8}'(?P<d>[^'\r\n]{1,200})'",
    re.IGNORECASE,
)
"""``CREATE USER .. IDENTIFIED BY 'x'``, ``ALTER ROLE .. WITH PASSWORD 'x'``."""
_NETRC = Expression(
    r"\bmachine[ \t]{1,8}\S{1,64}(?:\s{1,12}login[ \t]{1,8}\S{1,64})?"
    r"(?:\s{1,12}account[ \t]{1,8}\S{1,64})?\s{1,12}password[ \t]{1,8}(?P<v>\S+)"
)
"""``machine host login user password x`` (.netrc)."""
_YAML_BLOCK = Expression(
    _KEY + r"[ \t]{0,8}:[ \t]{0,8}[|>][-+0-9]{0,4}[ \t]{0,8}(?:#[^\r\n]{0,100})?\r?\n"
    r"(?P<v>(?P<ind>[ \t]{1,32})\S[^\r\n]*(?:\r?\n(?:(?P=ind)[^\r\n]*|[ \t]*(?=\r?\n)))*)",
    re.IGNORECASE,
)
"""A YAML block scalar under a secret's key (``password: |`` then indented lines)."""


def _accept_yaml_block(match: re.Match[str], value: str) -> bool:
    if match.group("weak") is not None:
        return credential_like(value.split()[0]) if value.split() else False
    return not _placeholder_or_code(value.strip(), match.group("key"))


# --- the detectors --------------------------------------------------------------------------


def _token(name: str, pattern: str, *hints: str, flags: int = 0) -> Detector:
    return Detector(name, Expression(pattern, flags), tuple(h.lower() for h in hints))


_PRIVATE_BLOCK_END = r"(?i:-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)"
_SSH2_END = r"---- END SSH2 (?:ENCRYPTED )?PRIVATE KEY ----"
_OPENVPN_END = r"-----END OpenVPN Static key V1-----"
_PUTTY_END = r"\n[ \t]*Private-(?:MAC|Hash):[ \t]*[0-9A-Fa-f]+(?=\r?\n)"
_PUTTY_LAST = r"\n[ \t]*Private-(?:MAC|Hash):[ \t]*[0-9A-Fa-f]+"


def _block(name: str, begin: str, end: str, hint: str, trigger: str, last: str = "") -> Detector:
    """A key block from its BEGIN line to its END line, or to the end of the text without one
    (output cut short: the rest is the key)."""
    return Detector(
        name,
        Expression(begin + r"(?:.*?" + (last or end) + r"|.*)", re.DOTALL),
        (hint,),
        multiline=True,
        trigger=(trigger,),
        end=Expression(end),
    )


def build() -> tuple[Detector, ...]:
    """Reel's own detectors, in priority order (overlapping spans are merged into one); the
    vendor rules of :mod:`events.redaction.vendor_rules` follow them (see
    :func:`events.redaction.redact.detectors`, which calls this once, on first use). Nothing is
    compiled here: each expression is, when a text first needs it (:class:`Expression`)."""
    pair = _pair(_key(_STRONG_WORDS))
    # The same in other languages: a detector of its own, so text without those words does not
    # pay for them.
    pair_local = _pair(_key(_LOCAL, weak="(?!)", vague="parola"))
    # One anchor for the English pair, flag and SQL detectors (a superset of each one's words),
    # so a scan finds the key runs once for all three.
    key_anchor = _anchor((*PAIR_WORDS, "identified"))
    return (
        _block(
            "private_key_block",
            # As gitleaks' private-key rule reads it (any case, ``_`` and ``-`` in the type,
            # doubled spaces): a stream holds every block that rule redacts.
            r"(?i:-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)",
            _PRIVATE_BLOCK_END,
            "private key",
            "-----begin",
        ),
        _block(
            "ssh2_private_key",
            r"---- BEGIN SSH2 (?:ENCRYPTED )?PRIVATE KEY ----",
            _SSH2_END,
            "begin ssh2",
            "---- begin",
        ),
        _block(
            "openvpn_static_key",
            r"-----BEGIN OpenVPN Static key V1-----",
            _OPENVPN_END,
            "openvpn static key",
            "-----begin",
        ),
        _block(
            "putty_private_key",
            r"PuTTY-User-Key-File-\d+:",
            _PUTTY_END,
            "putty-user-key-file",
            "putty-user-key-file",
            last=_PUTTY_LAST,
        ),
        Detector(
            "signify_minisign_secret_key",
            Expression(
                r"untrusted comment:[^\r\n]{0,120}secret key[^\r\n]{0,120}\r?\n"
                r"(?P<v>[A-Za-z0-9+/=]{20,})"
            ),
            ("untrusted comment",),
            groups=("v",),
            trigger=("untrusted comment",),
        ),
        _token(
            "openai_anthropic",
            r"\bsk-(?:[A-Za-z0-9_]+-)*[A-Za-z0-9_]{16,}(?:-[A-Za-z0-9_]+)*",
            "sk-",
        ),
        _token("stripe", r"\b[rs]k_(?:live|test)_[0-9A-Za-z]{10,}", "k_live_", "k_test_"),
        _token("github", r"\bgh[pousr]_[A-Za-z0-9]{20,}", "gh"),
        _token("github_fine_grained", r"\bgithub_pat_[A-Za-z0-9_]{20,}", "github_pat_"),
        _token(
            "gitlab", r"\bgl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_-]{20,}", "gl"
        ),
        _token("slack", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", "xox"),
        _token(
            "slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9_/]+", "hooks.slack"
        ),
        _token("google", r"\bAIza[0-9A-Za-z_-]{35}", "aiza"),
        _token("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", "eyj"),
        _token("sendgrid", r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}", "sg."),
        _token("npm", r"\bnpm_[A-Za-z0-9]{36}\b", "npm_"),
        _token("pypi", r"\bpypi-AgE[A-Za-z0-9_-]{50,}", "pypi-"),
        _token("huggingface", r"\bhf_[A-Za-z0-9]{30,}\b", "hf_"),
        _token("reel", r"\breel_(?:[0-9A-Z]{26}|admin)_[A-Za-z0-9_-]{43}", "reel_"),
        Detector(
            "aws_access_key_id",
            Expression(
                r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"
            ),
            (),
            case_hints=(
                "A3T",
                "AKIA",
                "ASIA",
                "ABIA",
                "ACCA",
                "AGPA",
                "AIDA",
                "AROA",
                "ANPA",
                "ANVA",
                "AIPA",
            ),
        ),
        Detector("twilio", Expression(r"\bSK[0-9a-f]{32}\b"), (), case_hints=("SK",)),
        Detector(
            "url_password",
            Expression(
                # The scheme's last 32 characters at most, wherever its run starts: past the
                # hold bound a run is cut REACH before its end, and ``x`` * 700 glued to
                # ``redis://:pw@host`` lost the scheme's start to the cut, then its password.
                r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s/?#:@]*:(?P<v>[^\s/?#@]+(?:@[^\s/?#@]+)*)@"
            ),
            ("://",),
            groups=("v",),
            accept=lambda m, v: not _placeholder_or_code(v, ""),
        ),
        Detector(
            "aws_secret_access_key",
            Expression(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
            (),
            accept=_accept_aws_secret,
            min_length=40,
            run=40,  # its match is such a run: tried only around one (most text has none)
        ),
        Detector(
            "authorization",
            Expression(
                r"\b(?:proxy-)?authorization\\{0,31}[\"']?[ \t]{0,4}[:=][ \t]{0,4}\\{0,31}[\"']?"
                r"(?P<v>(?:[A-Za-z][A-Za-z0-9-]{0,31}[ \t]{1,4})?[A-Za-z0-9._~+/=:-]{8,})",
                re.IGNORECASE,
            ),
            ("authorization",),
            groups=("v",),
            accept=_accept_authorization,
            ends_at_line_end=True,
            trigger=("authorization",),
        ),
        Detector(
            "bearer",
            Expression(r"\bbearer[ \t]{1,4}(?P<v>[A-Za-z0-9._~+/-]{8,}=*)", re.IGNORECASE),
            ("bearer",),
            groups=("v",),
            accept=_accept_bearer,
            trigger=("bearer",),
        ),
        Detector(
            "basic",
            Expression(
                r"\bbasic[ \t]{1,4}(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])", re.IGNORECASE
            ),
            ("basic",),
            groups=("v",),
            accept=_accept_basic,
            trigger=("basic",),
        ),
        Detector(
            "cookie",
            Expression(
                r"\b(?:set-)?cookie\\{0,31}[\"']?[ \t]{0,4}:[ \t]{0,4}"
                # name=value pairs: the first name is one short word, so "Cookie: chocolate chip"
                # is prose, and the verdict never waits past REACH for an "=".
                r"(?:\"(?P<q>[^\s\";=]{1,64}=[^\"\r\n]{0,160})\"|(?P<v>[^\s\";=]{1,128}=[^\r\n]*))",
                re.IGNORECASE,
            ),
            ("cookie",),
            groups=("q", "v"),
            ends_at_line_end=True,
            trigger=("cookie",),
        ),
        Detector(
            "pair",
            pair,
            PAIR_WORDS,
            groups=_PAIR_VALUES,
            accept=_accept_pair,
            anchor=key_anchor,
            ends_at_line_end=True,
            trigger=PAIR_WORDS,
        ),
        Detector(
            "pair_local",
            pair_local,
            LOCAL_WORDS,
            groups=_PAIR_VALUES,
            accept=_accept_pair,
            anchor=_anchor(LOCAL_WORDS),
            ends_at_line_end=True,
            trigger=LOCAL_WORDS,
        ),
        Detector(
            "yaml_block",
            _YAML_BLOCK,
            PAIR_WORDS + LOCAL_WORDS,
            groups=("v",),
            accept=_accept_yaml_block,
            continues=True,
            anchor=_anchor(PAIR_WORDS + LOCAL_WORDS),
            trigger=PAIR_WORDS + LOCAL_WORDS,
        ),
        Detector(
            "xml",
            _XML,
            PAIR_WORDS + LOCAL_WORDS,
            groups=("q1", "q2", "q3", "v"),
            accept=_accept_xml,
            trigger=PAIR_WORDS + LOCAL_WORDS,
        ),
        Detector(
            "cli_flag",
            _FLAG,
            ("pass", "pwd", "key", "token", "secret"),
            groups=("q1", "q2", "v"),
            accept=_accept_flag,
            anchor=key_anchor,
            trigger=("pass", "pwd", "key", "token", "secret"),
        ),
        Detector(
            "cli_password_flag",
            _CLI_SHORT,
            ("-p", "-a", "-w", "-u", "/p:", "-b"),
            groups=tuple("abcdefghijklm"),
            accept=lambda m, v: not _placeholder_or_code(v, ""),
            anchor=_anchor(CLI_COMMANDS),
            trigger=CLI_COMMANDS,
            overlaps=True,
        ),
        Detector(
            "cli_user_password",
            _USER_PASSWORD,
            ("-u", "--user", "--proxy-user"),
            groups=("q", "w", "v"),
            accept=_accept_user_password,
            trigger=("-u",),
        ),
        Detector(
            "sql_password",
            _SQL,
            ("identified", "password"),
            groups=("a", "b", "c", "d"),
            accept=lambda m, v: not _placeholder_or_code(v, ""),
            anchor=key_anchor,
            trigger=("identified", "password"),
        ),
        Detector(
            "netrc",
            _NETRC,
            ("machine",),
            groups=("v",),
            accept=lambda m, v: not _placeholder_or_code(v, ""),
            trigger=("machine",),
        ),
    )


REACH = 320
"""The most characters any construct other than a key block needs, from its trigger word, before
it matches at all (a quoted value is matched while still open, so its closing quote does not
count): streaming holds text after a trigger word this long, counted as written and as read
through escapes (the detectors read both). Every gap in an expression that can hold
whitespace is bounded for it (``[ \t]{1,8}``, a host of at most 64 characters), and
``tests/events/redaction/test_reach.py`` reads every expression to hold them to it."""
