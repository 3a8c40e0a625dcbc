"""One-line rewrites for the CyberSecEval pairs of the safety x code cell: the flagged line of the
origin code made safe by a transparent, named rule (e.g. ``hashlib.md5(`` -> ``hashlib.sha256(``,
``strcpy`` -> ``snprintf``), or None when no rule applies cleanly. Nothing here is executed.
"""

from __future__ import annotations

import re

_SEC_HINT = re.compile(r"(?i)passw|token|secret|salt|nonce|session|otp|csrf|auth|crypt|captcha"
                       r"|verif|api.?key|private.?key")
_IDENT = r"[A-Za-z_]\w*"


def _call_args(line: str, open_idx: int) -> tuple[list[str], int] | None:
    """Top-level arguments of the call whose '(' is at open_idx and the index after its ')';
    None when the call does not close on this line."""
    depth, quote, cur, args, i = 0, "", [], [], open_idx
    while i < len(line):
        ch = line[i]
        if quote:
            cur.append(ch)
            if ch == "\\" and i + 1 < len(line):
                cur.append(line[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            cur.append(ch)
        elif ch in "([{":
            depth += 1
            if depth > 1:
                cur.append(ch)
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return [a for a in args if a] if args != [""] else [], i + 1
            cur.append(ch)
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    return None


def _one_call(line: str, name_re: str, build) -> str | None:
    """Replace the single call matched by name_re (up to and including its '(') with
    build(args); None if there is not exactly one such call or build declines."""
    hits = list(re.finditer(name_re, line))
    if len(hits) != 1:
        return None
    parsed = _call_args(line, hits[0].end() - 1)
    if parsed is None:
        return None
    new = build(parsed[0])
    return None if new is None else line[:hits[0].start()] + new + line[parsed[1]:]


def _c_array_size(code: str, name: str) -> str | None:
    m = re.search(r"\b(?:char|wchar_t|TCHAR|WCHAR|CHAR|gchar|u?int8_t|BYTE|UCHAR|u8)\b"
                  r"[^;(){}=]*?[\s,*]" + re.escape(name) + r"\s*\[([^\]]+)\]", code)
    return m.group(1).strip() if m else None


def _c_bounded(code: str, make):
    def build(args):
        if not args or not re.fullmatch(_IDENT, args[0]) or not _c_array_size(code, args[0]):
            return None
        return make(args)
    return build


def _scanf(line: str, code: str) -> str | None:
    def build(args):
        m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"', args[0]) if args else None
        if not m:
            return None
        fmt, k, out, changed = m.group(1), 0, [], False
        pos = 0
        for conv in re.finditer(r"%(\*?)(\d*)(l{0,2}[a-zA-Z]|\[[^\]]*\]|%)", fmt):
            out.append(fmt[pos:conv.start()])
            pos = conv.end()
            text = conv.group(0)
            if conv.group(3) != "%" and not conv.group(1):
                k += 1
                if conv.group(3) == "s" and not conv.group(2):
                    target = args[k].lstrip("&").strip() if k < len(args) else ""
                    size = _c_array_size(code, target) if re.fullmatch(_IDENT, target) else None
                    if not size or not size.isdigit() or int(size) < 2:
                        return None
                    text, changed = f"%{int(size) - 1}s", True
            out.append(text)
        out.append(fmt[pos:])
        return f'scanf("{"".join(out)}", {", ".join(args[1:])})' if changed else None
    return _one_call(line, r"(?<![\w.>])scanf\s*\(", build)


def _malloc(line: str) -> str | None:
    def build(args):
        if len(args) != 1:
            return None
        parts, depth, cur = [], 0, []
        for ch in args[0]:
            depth += 1 if ch in "([" else -1 if ch in ")]" else 0
            if ch == "*" and depth == 0:
                parts.append("".join(cur).strip())
                cur = []
            else:
                cur.append(ch)
        parts.append("".join(cur).strip())
        if len(parts) != 2 or not all(parts):
            return None
        return f"calloc({parts[0]}, {parts[1]})"
    return _one_call(line, r"(?<![\w.>])malloc\s*\(", build)


def _sprintf(line: str, code: str) -> str | None:
    hits = list(re.finditer(r"(?<![\w.>])sprintf\s*\(\s*([A-Za-z_]\w*)\s*,", line))
    if len(hits) != 1 or not _c_array_size(code, hits[0].group(1)):
        return None
    dst = hits[0].group(1)
    return line[:hits[0].start()] + f"snprintf({dst}, sizeof({dst})," + line[hits[0].end():]


def _py_eval(line: str) -> str | None:
    def build(args):
        if len(args) != 1 or not re.fullmatch(r"[A-Za-z_][\w.]*(\[[^\]]+\])*", args[0]):
            return None
        if re.search(r"(?i)func|cls|class|name|method|model|dataset|type|^id$", args[0]):
            return None  # the string names code to look up; a literal parser would not do
        return f"ast.literal_eval({args[0]})"
    new = _one_call(line, r"(?<![\w.])eval\s*\(", build)
    return None if new is None or re.search(r"literal_eval\([^()]*\)\s*\(", new) else new


def _py_shell(line: str) -> str | None:
    if line.count("shell=True") != 1:
        return None

    def build(args):
        if not args:
            return None
        first = args[0]
        lit = re.fullmatch(r"""(['"])([^'"\\|&;<>$`*%{}()]+)\1""", first)
        if re.fullmatch(r"[A-Za-z_][\w.]*", first):
            new_first = f"shlex.split({first})"
        elif lit and lit.group(2).strip():
            new_first = "[" + ", ".join(repr(w) for w in lit.group(2).split()) + "]"
        else:
            return None
        rest = [("shell=False" if a.replace(" ", "") == "shell=True" else a) for a in args[1:]]
        return None if rest == args[1:] else "(" + ", ".join([new_first] + rest) + ")"

    hits = list(re.finditer(r"\b(?:call|check_call|check_output|Popen|run)\s*\(", line))
    if len(hits) != 1:
        return None
    parsed = _call_args(line, hits[0].end() - 1)
    if parsed is None or (new := build(parsed[0])) is None:
        return None
    return line[:hits[0].end() - 1] + new + line[parsed[1]:]


_SQL_VALUE_POS = re.compile(r"(?i)([=<>(,]|\blike|\blimit|\boffset|\bin)\s*$")


def _py_sql(line: str) -> str | None:
    def build(args):
        if len(args) != 1:
            return None
        m = re.fullmatch(r"""(?s)('''|\"\"\"|"|')(.*?)\1\s*%\s*(.+)""", args[0])
        if not m:
            return None
        q, body, rest = m.groups()
        convs = list(re.finditer(r"""(['"]?)%[sd]\1""", body))
        if not convs or "%" in re.sub(r"""(['"]?)%[sd]\1""", "", body):
            return None
        if not re.match(r"(?i)\s*(select|insert|update|delete|replace)\b", body) or any(
                not _SQL_VALUE_POS.search(body[:c.start()]) or c.group(1) == '"' for c in convs):
            return None  # not SQL, or a placeholder stands for a name (not a bindable value)
        new_body = re.sub(r"""(['"]?)%[sd]\1""", "%s", body)
        inner = _call_args(rest, 0) if rest.startswith("(") else None
        if inner and inner[1] == len(rest):
            params = inner[0]
        elif re.fullmatch(r"[\w.\[\]'\"]+", rest):
            params = [rest]
        else:
            return None
        if len(params) != len(convs):
            return None
        tup = "(" + ", ".join(params) + ("," if len(params) == 1 else "") + ")"
        return f".execute({q}{new_body}{q}, {tup})"
    return _one_call(line, r"\.execute\s*\(", build)


def _subs(*pairs: tuple[str, str]):
    def fn(line: str, code: str) -> str | None:
        new = line
        for pat, rep in pairs:
            new = re.sub(pat, rep, new)
        return new
    return fn


_CSPRNG_JS = "(crypto.getRandomValues(new Uint32Array(1))[0] / 4294967296)"
_PY_RAND = r"\brandom\.(random|randint|randrange|choice|choices|sample|shuffle|uniform|getrandbits)\("

# (languages, detector-rule regex, name, words that must not appear in the request,
#  needs a security hint in the code, rewrite(line, code) -> new line or None)
_RULES = (
    ({"python"}, r"PY-R-00[245]", "py-hash-sha256", ("md5", "sha1", "sha-1"), False,
     _subs((r"\bhashlib\.(md5|sha1)\(", "hashlib.sha256("),
           (r"\bhashlib\.new\((['\"])(md5|sha1)\1", r"hashlib.new(\1sha256\1"))),
    ({"python"}, r"prng-random$", "py-random-systemrandom", (), True,
     lambda line, code: None if "seed" in line else re.sub(_PY_RAND, r"random.SystemRandom().\1(",
                                                           line)),
    ({"python"}, r"unsafe-yaml-use$", "py-yaml-safe-load", (), False,
     lambda line, code: re.sub(r"\byaml\.load\(", "yaml.safe_load(", line)
     if "Loader" not in line else None),
    ({"python"}, r"unsafe-(json-)?pickle-use$", "py-pickle-json", ("pickle",), False,
     lambda line, code: None if re.search(r"dumps?\(|\.pkl|\.pickle", line) else _subs(
         (r"\b(?:cPickle|pickle|jsonpickle)\.(?:loads|decode)\(", "json.loads("),
         (r"\b(?:cPickle|pickle)\.load\(", "json.load("))(line, code)),
    ({"python"}, r"subprocess-using-shell$", "py-shell-false", ("shell",), False,
     lambda line, code: _py_shell(line)),
    ({"python"}, r"insecure-eval-use$", "py-literal-eval", ("eval",), False,
     lambda line, code: _py_eval(line)),
    ({"python"}, r"insecure-os-(system|popen)-use$", "py-subprocess-args", ("system", "popen"),
     False,
     lambda line, code: _one_call(
         line, r"\bos\.system\s*\(", lambda a: f"subprocess.run(shlex.split({a[0]})).returncode"
         if len(a) == 1 and re.fullmatch(r"[A-Za-z_][\w.]*", a[0]) else None)),
    ({"python"}, r"python\.third-party\.sql_injection$", "py-sql-params", (), False,
     lambda line, code: _py_sql(line)),
    ({"c", "cpp"}, r"C-R-002$", "c-strcpy-snprintf", ("strcpy",), False,
     lambda line, code: _one_call(line, r"(?<![\w.>])strcpy\s*\(", _c_bounded(
         code, lambda a: f'snprintf({a[0]}, sizeof({a[0]}), "%s", {a[1]})'
         if len(a) == 2 else None))),
    ({"c", "cpp"}, r"C-R-003$", "c-strcat-strncat", ("strcat",), False,
     lambda line, code: _one_call(line, r"(?<![\w.>])strcat\s*\(", _c_bounded(
         code, lambda a: f"strncat({a[0]}, {a[1]}, sizeof({a[0]}) - strlen({a[0]}) - 1)"
         if len(a) == 2 else None))),
    ({"c", "cpp"}, r"C-W-001$", "c-sprintf-snprintf", ("sprintf",), False, _sprintf),
    ({"c", "cpp"}, r"C-R-012$", "c-gets-fgets", ("gets",), False,
     lambda line, code: _one_call(line, r"(?<![\w.>])gets\s*\(", _c_bounded(
         code, lambda a: f"fgets({a[0]}, sizeof({a[0]}), stdin)" if len(a) == 1 else None))),
    ({"c", "cpp"}, r"C-R-001$", "c-scanf-width", ("scanf",), False, _scanf),
    ({"c", "cpp"}, r"C-W-004$", "c-malloc-calloc", (), False, lambda line, code: _malloc(line)),
    ({"cpp"}, r"CPP-R-001$", "cpp-unique-ptr", ("auto_ptr",), False,
     _subs((r"\b(std::)?auto_ptr\b", r"\1unique_ptr"))),
    ({"c", "cpp"}, r"C-R-00[45]$", "c-evp-sha256", ("md5", "sha1", "sha-1"), False,
     _subs((r"\bEVP_(md5|sha1)\(\)", "EVP_sha256()"))),
    ({"csharp"}, r"csharp\.third-party\.csrf$", "cs-antiforgery", (), False,
     lambda line, code: re.sub(r"^(\s*)\[(HttpPost|HttpPut|HttpDelete|HttpPatch)\](\s*)$",
                               r"\1[\2, ValidateAntiForgeryToken]\3", line)),
    ({"csharp"}, r"crypto-weak-hashing-function$", "cs-hash-sha256", ("md5", "sha1", "sha-1"),
     False, _subs((r"\b(MD5|SHA1)(CryptoServiceProvider|Managed|Cng)\b", r"SHA256\2"),
                  (r"\b(MD5|SHA1)\.Create\(", "SHA256.Create("),
                  (r"(?<![\w.])(MD5|SHA1)(?=\s+\w+\s*=)", "SHA256"))),
    ({"csharp"}, r"crypto-weak-cipher-algorithm$", "cs-cipher-aes", ("des", "rc2"), False,
     _subs((r"\b(TripleDES|DES|RC2)CryptoServiceProvider\b", "AesCryptoServiceProvider"),
           (r"\b(TripleDES|DES|RC2)\.Create\(\)", "Aes.Create()"))),
    ({"java"}, r"JAVA-R-(007|013|015)$", "java-hash-sha256", ("md5", "sha1", "sha-1"), False,
     _subs((r'getInstance\("(MD5|MD2|SHA-1|SHA1|SHA)"\)', 'getInstance("SHA-256")'),
           (r"\bDigestUtils\.(md5|sha1|sha)(Hex)?\(", r"DigestUtils.sha256\2("),
           (r"\bHashing\.(md5|sha1)\(\)", "Hashing.sha256()"))),
    ({"java"}, r"random_number_generator_methods$", "java-securerandom", (), True,
     _subs((r"\bnew\s+Random\(", "new SecureRandom("),
           (r"\bMath\.random\(\)", "new SecureRandom().nextDouble()"))),
    ({"java"}, r"JAVA-R-00[1345]$", "java-cipher-aes-gcm", ("des", "ecb", "blowfish"), False,
     _subs((r'Cipher\.getInstance\("(DES|DESede|TripleDES|Blowfish|AES)(/[A-Z]+/\w+)?"\)',
            'Cipher.getInstance("AES/GCM/NoPadding")'),)),
    ({"javascript"}, r"(JS-R-00[23]|pseudo-random-bytes)$", "js-crypto-random", (), True,
     _subs((r"\bMath\.random\(\)", _CSPRNG_JS),
           (r"\bcrypto\.pseudoRandomBytes\(", "crypto.randomBytes("))),
    ({"javascript"}, r"post-message-origin$", "js-postmessage-origin", (), False,
     lambda line, code: re.sub(r",\s*(['\"])\*\1\s*\)", ", window.location.origin)", line)
     if "postMessage(" in line else None),
    ({"javascript"}, r"\.eval-with-expression$", "js-json-parse", ("eval",), False,
     _subs((r"\beval\(\s*(['\"])\(\1\s*\+\s*([\w.\[\]]+)\s*\+\s*(['\"])\)\3\s*\)",
            r"JSON.parse(\2)"),)),
    ({"javascript"}, r"(detect-new-buffer|unsafe-alloc)$", "js-buffer-safe", (), False,
     lambda line, code: re.sub(r"\bBuffer\.allocUnsafe\(", "Buffer.alloc(", line)
     if "allocUnsafe" in line else _one_call(
         line, r"\bnew\s+Buffer\s*\(", lambda a: f"Buffer.from({', '.join(a)})"
         if len(a) == 2 or (a and a[0][:1] in "'\"") else None)),
    ({"php"}, r"PHP-R-015$", "php-hash-sha256", ("md5", "sha1", "sha-1"), False,
     _subs((r"(?<![\w>$:])(md5|sha1)\s*\(", "hash('sha256', "),)),
    ({"php"}, r"PHP-R-010$", "php-json-decode", ("serializ",), False,
     lambda line, code: _one_call(line, r"(?<![\w>$:])unserialize\s*\(",
                                  lambda a: f"json_decode({a[0]}, true)" if len(a) == 1 else None)),
    ({"php"}, r"PHP-R-029$", "php-random-int", (), True,
     lambda line, code: _one_call(line, r"(?<![\w>$:])(mt_rand|rand)\s*\(",
                                  lambda a: f"random_int({a[0]}, {a[1]})" if len(a) == 2 else None)),
    ({"rust"}, r"RUST-R-007$", "rust-sha256", ("md5", "sha1", "sha-1"), False,
     _subs((r"\bcrypto::(sha1::Sha1|md5::Md5)\b", "crypto::sha2::Sha256"),
           (r"\b(Sha1|Md5)::new\(\)", "Sha256::new()"))),
)


def rewrite_line(language: str, line: str, code: str, prompt: str,
                 detector_rule: str) -> tuple[str, str] | None:
    """The flagged line made safe by the first rule that fits, and the rule's name; None when
    no rule fits, the request itself asks for the flagged construct, or (for random-number
    rules) nothing in the code suggests the value is security-relevant."""
    low = prompt.lower()
    for langs, rule_re, name, words, needs_hint, fn in _RULES:
        if language not in langs or not re.search(rule_re, detector_rule):
            continue
        if any(w in low for w in words) or (needs_hint and not _SEC_HINT.search(code)):
            return None
        if re.match(r"\s*(#|//|/\*|\*|>>>)", line) or (language == "python" and _prose(line)):
            return None
        new = fn(line, code)
        if new is None or new == line or "\n" in new or _WEAK_NAME_LEFT.search(new):
            return None
        return new, name
    return None


_WEAK_NAME_LEFT = re.compile(r"""["'][^"']*(?i:md5|sha-?1\b)[^"']*["']""")


def _prose(line: str) -> bool:
    """A Python line that does not compile and is not an obvious continuation (docstring text)."""
    text = line.strip()
    try:
        compile(text, "<line>", "exec")
        return False
    except SyntaxError:
        return not text.endswith((",", "(", "[", "{", "\\", ":", "+", ")", "]", "}"))
