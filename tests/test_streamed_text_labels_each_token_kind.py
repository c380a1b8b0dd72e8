"""Streamed text is split into whole-character pieces and each token is labelled accepted/corrected/bonus."""
from transformers import AutoTokenizer

from exactspec.pairs.stdlib import PAIR_DIR
from exactspec.engine.text import styled_pieces, token_kinds


def test_token_kinds_tell_bonus_from_corrected():
    assert token_kinds([True, True, False], drafted=2) == ["accepted", "accepted", "bonus"]
    assert token_kinds([True, False], drafted=4) == ["accepted", "corrected"]
    assert token_kinds([False], drafted=0) == ["bonus"]  # nothing drafted: the target's own token


def test_pieces_join_to_the_decoded_text_and_keep_split_characters_whole():
    tok = AutoTokenizer.from_pretrained(PAIR_DIR / "target", local_files_only=True)
    text = "naïve = 'héllo → wörld'\n"
    ids = tok(text)["input_ids"]
    labels = list(range(len(ids)))
    pieces = styled_pieces(tok, ids, labels)
    assert "".join(p for p, _ in pieces) == text
    assert all("\ufffd" not in p for p, _ in pieces)
    # the arrow is 3 bytes in UTF-8; byte-level BPE may split it, then fewer pieces than tokens come out
    assert [lab for _, lab in pieces] == sorted(lab for _, lab in pieces)
    for start in range(len(ids)):  # resuming anywhere, even inside a split character, loses nothing
        shown = tok.decode(ids[:start]).rstrip("\ufffd")
        assert shown + "".join(p for p, _ in styled_pieces(tok, ids, labels, start)) == text
