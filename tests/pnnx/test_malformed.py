"""A corpus of broken .param/.bin files: each must raise PnnxFormatError (and nothing else) whose message
names the file and the line or member at fault."""

import random
import tracemalloc
import zipfile

import pytest

from kuiper.core.errors import PnnxFormatError
from kuiper.pnnx import load

from pnnx_files import TINY_MEMBERS, TINY_PARAM, files  # noqa: F401  (files is a fixture)

RELU = "F.relu                   relu                     1 1 1 2 $input=1 #1=(1,2)f32 #2=(1,2)f32"
FC_ATTRS = "@bias=(2)f32 @weight=(2,3)f32"


def edit(old, new):
    """A change to the tiny model's param text; `old` must occur in it."""
    def apply(text):
        assert old in text, old
        return text.replace(old, new, 1)
    return apply


# (id, change to the tiny param text, line the message must name)
PARAM_CASES = [
    ("bad-magic", edit("7767517", "7767518"), 1),
    ("empty-file", lambda t: "", 1),
    ("magic-only", lambda t: "7767517", 2),
    ("counts-garbled", edit("\n4 3\n", "\n4 x\n"), 2),
    ("counts-three-numbers", edit("\n4 3\n", "\n4 3 1\n"), 2),
    ("counts-negative", edit("\n4 3\n", "\n-4 3\n"), 2),
    ("fewer-lines-than-declared", lambda t: t[:t.index("pnnx.Output")], 6),
    ("cut-inside-a-line", lambda t: t[:t.index("#2=(1,2)f32") + 6], 5),
    ("more-lines-than-declared", edit("\n4 3\n", "\n3 3\n"), 6),
    ("operand-count-disagrees", edit("\n4 3\n", "\n4 5\n"), 2),
    ("blank-line-between-operators", edit(RELU, "\n" + RELU), 5),
    ("too-few-tokens", edit("1 0 2\n", "1\n"), 6),
    ("count-not-a-number", edit("1 0 2\n", "one 0 2\n"), 6),
    ("operand-name-missing", edit("1 1 1 2 $input=1", "1 1 1 $input=1"), 5),
    ("operand-name-extra", edit("1 1 1 2 $input=1", "1 1 1 2 9 $input=1"), 5),
    ("token-not-key-value", edit("#2=(1,2)f32", "#2=(1,2)f32 =5"), 5),
    ("bare-attribute-prefix", edit(FC_ATTRS, FC_ATTRS + " @=(2)f32"), 4),
    ("used-before-produced", edit("1 1 1 2 $input=1 #1=(1,2)f32", "1 1 7 2 $input=7 #7=(1,2)f32"), 5),
    ("produced-twice", edit("1 1 1 2 $input=1 #1=(1,2)f32 #2", "1 1 1 1 $input=1 #1=(1,2)f32 #1"), 5),
    ("operator-name-reused", edit(" relu      ", " fc        "), 5),
    ("shape-unclosed", edit("#0=(1,3)f32", "#0=(1,3f32"), 3),
    ("shape-unknown-type", edit("#0=(1,3)f32", "#0=(1,3)f31"), 3),
    ("shape-bad-dim", edit("#0=(1,3)f32", "#0=(1,-3)f32"), 3),
    ("shape-of-foreign-operand", edit("#2=(1,2)f32", "#2=(1,2)f32 #0=(1,3)f32"), 5),
    ("shape-conflicts-with-earlier", edit("#1=(1,2)f32 #2", "#1=(1,5)f32 #2"), 5),
    ("parameter-twice", edit("bias=True", "bias=True bias=False"), 4),
    ("attribute-twice", edit(FC_ATTRS, FC_ATTRS + " @bias=(2)f32"), 4),
    ("input-name-of-foreign-operand", edit("$input=1", "$input=0"), 5),
    ("input-name-twice", edit("$input=0", "$input=0 $input=0"), 4),
    ("input-names-exceed-slots", edit("$input=0", "$input=0 $other=0"), 4),
    ("parameter-not-a-number", edit("in_features=3", "in_features=3x"), 4),
    ("parameter-list-unclosed", edit("$input=1", "$input=1 k=(1,2"), 5),
    ("attribute-dynamic-dim", edit("@weight=(2,3)f32", "@weight=(?,3)f32"), 4),
    ("attribute-unknown-type", edit("@bias=(2)f32", "@bias=(2)f33"), 4),
    ("attribute-null-type", edit("@bias=(2)f32", "@bias=(2)null"), 4),
]


def _assert_names(error, *parts):
    assert type(error) is PnnxFormatError, type(error)
    for part in parts:
        assert part in str(error), (part, str(error))


@pytest.mark.parametrize("change, line", [c[1:] for c in PARAM_CASES], ids=[c[0] for c in PARAM_CASES])
def test_malformed_param(files, change, line):
    param = files.param(change(TINY_PARAM))
    files.bin(TINY_MEMBERS)
    with pytest.raises(PnnxFormatError) as info:
        load(param)
    _assert_names(info.value, f"{param}:{line}: ")


def test_param_not_utf8(files):
    param = files.param(TINY_PARAM.encode().replace(b" relu ", b" r\xffelu "))
    with pytest.raises(PnnxFormatError) as info:
        load(param)
    _assert_names(info.value, f"{param}:5: ", "UTF-8")


def test_param_missing(files):
    missing = files.root / "nothing.pnnx.param"
    with pytest.raises(PnnxFormatError) as info:
        load(missing)
    _assert_names(info.value, f"{missing}: ")


def _valid_zip(files, members):
    return files.bin(members).read_bytes()


def _patch(data, offset, new):
    return data[:offset] + new + data[offset + len(new):]


def _first_central_entry(data):
    return data.index(b"PK\x01\x02")


# (id, change to the param text or None, how to make the bin from (files, members), member the message
# must name, or None where the whole file is at fault)
BIN_CASES = [
    ("bin-missing", None, lambda f, m: None, None),
    ("bin-not-a-zip", None, lambda f, m: f.raw(b"this is not a zip archive" * 4), None),
    ("bin-empty", None, lambda f, m: f.raw(b""), None),
    ("bin-truncated-in-data", None, lambda f, m: f.raw(_valid_zip(f, m)[:60]), None),
    ("bin-truncated-in-directory", None, lambda f, m: f.raw(_valid_zip(f, m)[:-10]), None),
    ("member-missing", None, lambda f, m: f.bin({"fc.weight": m["fc.weight"]}), "fc.bias"),
    ("member-compressed", None, lambda f, m: f.bin(m, compressed={"fc.weight"}), "fc.weight"),
    ("member-too-short", None, lambda f, m: f.bin({**m, "fc.bias": m["fc.bias"][:4]}), "fc.bias"),
    ("member-too-long", None, lambda f, m: f.bin({**m, "fc.bias": m["fc.bias"] * 2}), "fc.bias"),
    ("member-twice", None, lambda f, m: f.bin(list(m.items()) + [("fc.bias", m["fc.bias"])]), "fc.bias"),
    ("huge-claimed-shape", edit("@weight=(2,3)f32", "@weight=(100000,100000,100000)f32"),
     lambda f, m: f.bin(m), "fc.weight"),
    ("type-size-disagrees", edit("@weight=(2,3)f32", "@weight=(2,3)f64"), lambda f, m: f.bin(m), "fc.weight"),
    ("local-header-broken", None, lambda f, m: f.raw(_patch(_valid_zip(f, m), 0, b"XX")), "fc.weight"),
    ("local-header-past-end", None,
     lambda f, m: f.raw(_patch(_valid_zip(f, m), _first_central_entry(_valid_zip(f, m)) + 42, b"\xff\xff\xff\x0f")),
     "fc.weight"),
    ("member-encrypted", None,
     lambda f, m: f.raw(_patch(_patch(_valid_zip(f, m), 6, b"\x01"), _first_central_entry(_valid_zip(f, m)) + 8,
                               b"\x01")),
     "fc.weight"),
]


@pytest.mark.parametrize("change, make_bin, member", [c[1:] for c in BIN_CASES], ids=[c[0] for c in BIN_CASES])
def test_malformed_bin(files, change, make_bin, member):
    param = files.param(change(TINY_PARAM) if change else TINY_PARAM)
    make_bin(files, TINY_MEMBERS)
    bin_path = files.root / "m.pnnx.bin"
    with pytest.raises(PnnxFormatError) as info:
        load(param)
    _assert_names(info.value, f"{bin_path} [member {member}]: " if member else f"{bin_path}: ")


def test_huge_claimed_shape_fails_before_allocating(files):
    param = files.param(TINY_PARAM.replace("@weight=(2,3)f32", "@weight=(100000,100000,100000)f32"))
    files.bin(TINY_MEMBERS)
    # refused from the declared size alone, before anything of that size is allocated
    tracemalloc.start()
    try:
        with pytest.raises(PnnxFormatError, match="needs 4000000000000000"):
            load(param)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def _load_or_format_error(param):
    """Load, touching every array; only PnnxFormatError may escape."""
    try:
        graph = load(param)
    except PnnxFormatError:
        return False
    for op in graph.operators:
        for attr in op.attrs.values():
            attr.numpy().sum()
    return True


def test_every_truncation_of_the_param(files):
    files.bin(TINY_MEMBERS)
    outcomes = [_load_or_format_error(files.param(TINY_PARAM[:cut])) for cut in range(len(TINY_PARAM))]
    assert not any(outcomes[:TINY_PARAM.index("pnnx.Output")])  # an operator line missing is always caught


def test_every_truncation_and_random_damage_of_the_bin(files):
    param = files.param(TINY_PARAM)
    data = _valid_zip(files, TINY_MEMBERS)
    for cut in range(len(data)):
        files.raw(data[:cut])
        assert not _load_or_format_error(param), cut  # the central directory sits at the end
    rng = random.Random(7767517)
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        files.raw(bytes(damaged))
        _load_or_format_error(param)


def test_zip64_store_with_damaged_extra(files):
    param = files.param(TINY_PARAM)
    files.bin(TINY_MEMBERS, zip64=set(TINY_MEMBERS))
    assert _load_or_format_error(param)
    data = (files.root / "m.pnnx.bin").read_bytes()
    with zipfile.ZipFile(files.root / "m.pnnx.bin") as archive:
        first = archive.infolist()[0]
    # the local zip64 extra follows the name; its length field sits at byte 28 of the local header
    files.raw(_patch(data, first.header_offset + 28, b"\xff\xff"))
    with pytest.raises(PnnxFormatError) as info:
        load(param)
    _assert_names(info.value, "[member fc.weight]")


def deep(depth: int) -> str:
    return "neg(" * depth + "@0" + ")" * depth


def test_expressions_nested_past_the_limit_are_refused_with_file_line_and_operator(files):
    from kuiper.pnnx.reader import MAX_EXPRESSION_DEPTH

    line = "pnnx.Expression          e                        1 1 2 3 expr={} #2=(1,2)f32\npnnx.Output"
    text = TINY_PARAM.replace("4 3", "5 4").replace("pnnx.Output              out                      1 0 2",
                                                   line.format(deep(MAX_EXPRESSION_DEPTH)) + " out 1 0 3")
    load(files.param(text), files.bin(TINY_MEMBERS))  # at the limit: read
    # the 1,000-deep expression hit Python's recursion limit in the parser
    for depth in (MAX_EXPRESSION_DEPTH + 1, 1000, 100_000):
        path = files.param(text.replace(deep(MAX_EXPRESSION_DEPTH), deep(depth)))
        with pytest.raises(PnnxFormatError, match=rf"m.pnnx.param:6: operator e: expr: calls nest {depth} deep, "
                                                  rf"over kuiper's limit of {MAX_EXPRESSION_DEPTH}"):
            load(path, files.bin(TINY_MEMBERS))
