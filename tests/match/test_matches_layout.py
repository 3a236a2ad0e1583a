"""The Matches layout (clpatch/match/matches.py) is spelled in one place, cl_src/lib/matches.mako:
every template that writes or reads search results includes it and spells no index of its own.
Needs no device: templates are only rendered."""

import re

import pytest
from mako.lookup import TemplateLookup
from mako.template import Template

from clpatch.core.kernels import render
from clpatch.core.profiles import family_profile
from clpatch.core.resources import cl_src_dir

HEADER = "lib/matches.mako"
# The writers (the windowed search through lib/nn_table.mako, VBM3D's video search) and the
# readers (the collaborative filter, NL-means) of search results.
USERS = ("match/search.cl.mako", "lib/nn_table.mako", "match/video_search.cl.mako",
         "denoise/collaborative.cl.mako", "denoise/nlmeans.cl.mako")
INCLUDE = re.compile(r'<%namespace\s+name="(\w+)"\s+file="/lib/matches\.mako"\s*/>')
# What a template spelling the layout itself would contain: a subscript of a results buffer
# (named pos / dist / out_pos / out_dist in every kernel) or the entry arithmetic ref * N + k.
RAW_INDEX = re.compile(r"\b(?:out_)?(?:pos|dist)\s*\[|\*\s*\$\{\s*N\s*\}\s*\+")


def code_of(text: str) -> str:
    """Template text without Mako (##) and OpenCL (//) comments, which may describe the layout
    (a // after code only after ; { or }: elsewhere it may be Python's floor division)."""
    lines = (line for line in text.splitlines() if not line.lstrip().startswith(("##", "//")))
    return "\n".join(re.sub(r"([;{}])\s*//.*$", r"\1", line) for line in lines)


def templates() -> list[str]:
    root = cl_src_dir()
    return sorted(p.relative_to(root).as_posix() for p in root.glob("**/*.mako"))


@pytest.mark.parametrize("name", USERS)
def test_every_writer_and_reader_includes_the_layout(name):
    text = (cl_src_dir() / name).read_text()
    match = INCLUDE.search(text)
    assert match, f"{name} does not include /{HEADER}"
    assert f"{match.group(1)}." in code_of(text), f"{name} includes /{HEADER} but does not use it"
    if name.endswith(".cl.mako"):
        # The tag's line ends with a backslash: including the header adds no line to the kernel.
        line_end = text[match.end():].split("\n", 1)[0]
        assert line_end == "\\", f"{name}: the include line must end with a backslash"


def test_no_template_spells_the_layout_itself():
    names = templates()
    assert HEADER in names and set(USERS) <= set(names)
    offenders = {}
    for name in names:
        if name == HEADER:
            continue
        hits = RAW_INDEX.findall(code_of((cl_src_dir() / name).read_text()))
        if hits:
            offenders[name] = hits
    assert not offenders, f"index the results through /{HEADER}: {offenders}"


# ---- the defs ------------------------------------------------------------------------------


def spell(expr: str) -> str:
    """The text a Mako expression over the header's defs (namespace `mt`) renders to."""
    lookup = TemplateLookup(directories=[str(cl_src_dir())], strict_undefined=True)
    source = '<%namespace name="mt" file="/lib/matches.mako"/>\\\n${' + expr + "}"
    return Template(source, lookup=lookup, strict_undefined=True).render()


@pytest.mark.parametrize("expr, text", [
    ('mt.ref("gi", "gj", "gx")', "gi * gx + gj"),
    ('mt.ref("ti", "gj", "gx", frame="fr", gy="out_gy")', "(fr * out_gy + ti) * gx + gj"),
    ('mt.first(mt.ref("out_row0 + i", "out_col0 + j", "out_gx", frame="out_f0 + f", gy="out_gy"), 16)',
     "(((out_f0 + f) * out_gy + out_row0 + i) * out_gx + out_col0 + j) * 16"),
    ('mt.entry_from("first", 3)', "first + 3"),
    ('mt.dist("dist", mt.entry("ref", 8, "j"))', "dist[ref * 8 + j]"),
    ('mt.pos_t("pos", mt.entry("ref", 8, "j"), 3)', "pos[(ref * 8 + j) * 3]"),
    ('mt.pos_y("pos", mt.entry("ref", 8, "j"), 3)', "pos[(ref * 8 + j) * 3 + 1]"),
    ('mt.pos_x("pos", mt.entry("ref", 8, "j"), 3)', "pos[(ref * 8 + j) * 3 + 2]"),
    ('mt.pos_y("pos", mt.entry("ref", 8, 5), 2)', "pos[(ref * 8 + 5) * 2]"),
    ('mt.pos_x("pos", mt.entry("ref", 8, 5), 2)', "pos[(ref * 8 + 5) * 2 + 1]"),
    ('mt.pos_t("out_pos", "e", 3)', "out_pos[3 * e]"),
    ('mt.pos_x("out_pos", "e", 2)', "out_pos[2 * e + 1]"),
])
def test_defs_spell_the_indices_of_the_tuned_kernels(expr, text):
    # These spellings are the ones the kernels had before the header: changing one changes
    # every kernel's source, and with it the compiled binaries that tuned timings were taken on.
    assert spell(expr) == text


def index_in(lvalue: str) -> str:
    return re.fullmatch(r"\w+\[(.*)\]", lvalue).group(1)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("named", [False, True])
def test_defs_compute_the_contract_layout(dim, named):
    """Entry e = ref * n + k, distance at e, position component c at e * dim + c, ref in
    [frame][grid row][grid column] order: the spelled C indices evaluate to exactly that."""
    frames, gy, gx, n = 2, 3, 5, 4
    names = ["t", "y", "x"][-dim:]
    for f, row, col, k in [(0, 0, 0, 0), (1, 2, 4, 3), (1, 0, 3, 1), (0, 2, 1, 2)]:
        values = dict(f=f, row=row, col=col, gy=gy, gx=gx)
        ref = eval(spell('mt.ref("row", "col", "gx", frame="f", gy="gy")'), {}, values)
        assert ref == (f * gy + row) * gx + col < frames * gy * gx
        entry = f'mt.entry("{ref}", {n}, {k})'
        if named:  # a writer holding the entry in a variable
            values["e"] = eval(spell(f'mt.entry_from(mt.first("{ref}", {n}), {k})'), {})
            entry = '"e"'
        e = ref * n + k
        assert eval(index_in(spell(f'mt.dist("dist", {entry})')), {}, values) == e
        for c, coordinate in enumerate(names):
            index = index_in(spell(f'mt.pos_{coordinate}("pos", {entry}, {dim})'))
            assert eval(index, {}, values) == e * dim + c


def test_only_video_positions_have_a_frame():
    with pytest.raises(ValueError, match="dimension 3"):
        spell('mt.pos_t("pos", "e", 2)')


# ---- the templates render -----------------------------------------------------------------

SEARCH = dict(patch=8, n=4, channels=1, metric="l2", table="ordered", video=False)
VIDEO = dict(patch=8, n=4, q=2, window_ref=7, window_pred=5, channels=1)
FILTER = dict(patch=8, n=4, channels=1, stage=1, transform_2d="bior1.5", transform_1d="haar",
              beta=2.0, aggregation="fixed")
NLM = dict(patch=5, n=4, channels=1, video=False, averaging="columns", aggregation="fixed",
           slots=8)
CASES = [
    ("match/search.cl.mako", dict(SEARCH, variant="naive"),
     ["out_dist[e] = NN_DIST(bk[3]);", "out_pos[2 * e + 1] = rx + OFFSET_X(code);"]),
    ("match/search.cl.mako", dict(SEARCH, variant="naive", video=True, table="unordered"),
     ["out_pos[3 * e] = frame_base + t + OFFSET_T(code);"]),
    ("match/search.cl.mako", dict(SEARCH, variant="rowband", step=4, width=64, rows=2, batch=4,
                                  shift_max=3),
     ["const int first = (((out_f0 + f) * out_gy + out_row0 + i0 + tr) * out_gx"
      " + out_col0 + j0 + tj) * 4;"]),
    ("match/search.cl.mako", dict(SEARCH, variant="square", tile=8, batch=4, metric="l1"),
     ["const int e = first + 3;"]),
    ("match/video_search.cl.mako", dict(VIDEO, variant="naive", lanes=1, group=64),
     ["out_pos[(ref * 4 + k) * 3 + 2] = some ? best_x[k] : -1;"]),
    ("match/video_search.cl.mako", dict(VIDEO, variant="window", lanes=8, group=8),
     ["out_dist[ref * 4 + k] = best_d[k];"]),
    ("match/video_search.cl.mako", dict(VIDEO, variant="patch", lanes=8, group=8), []),
    ("denoise/collaborative.cl.mako", dict(FILTER, stagger=True),
     ["const int yb = pos[(ref * 4 + j) * 2] - band_y0;"]),
    ("denoise/collaborative.cl.mako", dict(FILTER, stage=2, transform_2d="dct", video=True,
                                           aggregation="cas", channels=3, colour=True),
     ["const int tb = (pos[(ref * 4 + j) * 3] - frame_base) % nf;"]),
    ("denoise/nlmeans.cl.mako", NLM, ["lw[slot][k] = exp(-fmax(dist[ref * 4 + k] * norm"]),
    ("denoise/nlmeans.cl.mako", dict(NLM, video=True, averaging="naive", aggregation="buffers",
                                     classes=2, slots=1, channels=3, colour=True, luma=True),
     ["const int xb = pos[(ref * 4 + 2) * 3 + 2];"]),
]


@pytest.mark.parametrize("family", ["nvidia", "cpu"])
@pytest.mark.parametrize("template, params, expected", CASES,
                         ids=[f"{t.split('/')[1].split('.')[0]}-{i}" for i, (t, _, _) in
                              enumerate(CASES)])
def test_templates_render_with_the_layout(template, params, expected, family):
    source = render(template, family_profile(family), **params)
    assert "__kernel" in source
    assert "${" not in source and "<%" not in source        # nothing left unrendered
    for text in expected:
        assert text in source, text
