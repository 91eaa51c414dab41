"""orchestration/provenance.py's readings of a run folder's records, kept while a file is unchanged."""

import json
import os

from orchestration import provenance


def test_a_remembered_reading_follows_the_file_it_read(tmp_path):
    """provenance.json_problem and recorded_hash are kept while a file is unchanged; a file rewritten in place
    (another size), replaced atomically (another inode) or removed is read again."""
    f = tmp_path / "eval_x.json"
    f.write_text(json.dumps({"provenance": {"stage_hash": "aaaa"}}))
    assert provenance.json_problem(f) is None and provenance.recorded_hash(f) == "aaaa"
    f.write_text('{"provenance": {"stage_hash": "bbbb"}, "more": 1}')  # in place, another size
    assert provenance.recorded_hash(f) == "bbbb"
    tmp = tmp_path / "new.json"
    tmp.write_text('{"provenance": {"stage_hash": "cccc"}, "more": 2}')  # the same size as before
    os.replace(tmp, f)  # as atomic_write_json does: a new inode
    assert provenance.recorded_hash(f) == "cccc"
    f.write_text('{"provenance": ')  # cut short
    assert provenance.json_problem(f).startswith("not valid JSON") and provenance.recorded_hash(f) is None
    f.unlink()
    assert provenance.json_problem(f) == "missing" and provenance.recorded_hash(f) is None
