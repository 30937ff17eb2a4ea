"""The items file of ``agentpool submit``: every well-formed JSON Lines file reads back as its
values, and any broken line is refused naming that line and what is wrong with it.

Hypothesis writes the files: JSON values of every shape, blank lines and CRLF endings among
them, and malformed lines of any text or bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentpool.api.runs import MAX_INLINE_ITEMS
from agentpool.console.submits import ItemsError, read_items

SOURCE = "items.jsonl"

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"), parse_constant=lambda name: 1 / 0)
    except (ValueError, ZeroDivisionError):
        return False
    return True


#: One line (no newline) that is not a JSON value: any text or bytes but a blank one.
broken_lines = (
    st.text().map(lambda text: text.encode("utf-8")) | st.binary() | st.sampled_from([b"NaN"])
).filter(lambda line: b"\n" not in line and line.strip(b" \t\r") and not _is_json(line))


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(json_values, min_size=1, max_size=8),
    blanks=st.lists(st.sampled_from([b"", b"  ", b"\t", b"\r"]), max_size=3),
    crlf=st.booleans(),
    ascii_only=st.booleans(),
)
def test_well_formed_lines_read_back_as_their_values(
    values: list[Any], blanks: list[bytes], crlf: bool, ascii_only: bool
) -> None:
    """Each line's value comes back, in order, whatever the values, with blank lines skipped
    and CRLF line ends taken as LF."""
    end = b"\r\n" if crlf else b"\n"
    lines = [json.dumps(value, ensure_ascii=ascii_only).encode() for value in values]
    data = end.join(blanks + lines + blanks) + end
    assert read_items(data, source=SOURCE) == values


@settings(max_examples=500, deadline=None)
@given(
    before=st.lists(json_values, max_size=5),
    broken=broken_lines,
    after=st.lists(st.one_of(json_values.map(json.dumps), st.text()), max_size=3),
)
def test_the_first_broken_line_is_named_by_its_number(
    before: list[Any], broken: bytes, after: list[str]
) -> None:
    """A malformed line, whatever it holds, fails the whole file with a message that names the
    file and the line's number (counting from 1) and says what is wrong; the lines after it
    do not matter."""
    assume(all("\n" not in line for line in after))
    lines = [json.dumps(value).encode() for value in before] + [broken]
    lines += [line.encode() for line in after]
    with pytest.raises(ItemsError) as refused:
        read_items(b"\n".join(lines), source=SOURCE)
    message = str(refused.value)
    assert message.startswith(f"{SOURCE} line {len(before) + 1}: ")
    assert any(what in message for what in ("not JSON", "not UTF-8", "is not JSON"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            b'{"a": 1}\n{"a": 2,}\n',
            "items.jsonl line 2: not JSON (Expecting property name "
            "enclosed in double quotes at column 9); give one JSON value a line",
        ),
        (b"1\n\n[1, NaN]\n", "items.jsonl line 3: NaN is not JSON (JSON numbers are finite)"),
        (b"1\n\xff\n", "items.jsonl line 2: not UTF-8 text (invalid start byte at byte 1)"),
        (b"\n \n", "items.jsonl has no items: give one JSON value a line"),
    ],
)
def test_each_kind_of_broken_file_says_how_to_fix_it(data: bytes, message: str) -> None:
    with pytest.raises(ItemsError) as refused:
        read_items(data, source=SOURCE)
    assert str(refused.value) == message


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_item() -> None:
    """A file saved by an editor that writes a BOM reads as the same items."""
    assert read_items(b'\xef\xbb\xbf{"a": 1}\n2\n', source=SOURCE) == [{"a": 1}, 2]


def test_more_items_than_a_run_holds_inline_points_at_the_other_sources() -> None:
    with pytest.raises(ItemsError) as refused:
        read_items(b"1\n" * (MAX_INLINE_ITEMS + 1), source=SOURCE)
    assert "ConfigMap" in str(refused.value)
    assert f"more than the {MAX_INLINE_ITEMS}" in str(refused.value)


def test_submit_with_a_broken_line_fails_before_reaching_a_cluster(tmp_path: Path) -> None:
    """`agentpool submit POOL -f FILE` with a broken line exits 2 with one line naming the file
    and the line, no traceback, and never asks for a cluster (none is configured here)."""
    items = tmp_path / "items.jsonl"
    items.write_text('{"n": 1}\n{"n": 2\n{"n": 3}\n')
    env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "missing")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    done = subprocess.run(
        [sys.executable, "-m", "agentpool", "submit", "p", "-f", str(items)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"agentpool: {items} line 2: not JSON (Expecting ',' delimiter at column 8); "
        "give one JSON value a line\n"
    )
    from_stdin = subprocess.run(
        [sys.executable, "-m", "agentpool", "submit", "p", "-f", "-"],
        env=env,
        input="[1]\nnope\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert from_stdin.returncode == 2
    assert from_stdin.stderr.startswith("agentpool: standard input line 2: not JSON")
