"""Randomized checks of the kv scheme grammar (the notebook 08_mlx_lm has the examples)."""
import pytest
from hypothesis import given, settings, strategies as st

from mlx_kvq.integrate import parse_scheme, KVScheme, AFFINE_BITS, TURBO_BITS

side = st.one_of(st.just(('fp16', None)), st.tuples(st.just('affine'), st.sampled_from(AFFINE_BITS)),
                 st.tuples(st.just('turbo'), st.sampled_from(TURBO_BITS)))


def spell(kind, b): return kind if kind == 'fp16' else f"{kind}:{b}"


@settings(max_examples=200, deadline=None)
@given(k=side, v=side)
def test_every_valid_scheme_round_trips(k, v):
    s = KVScheme(k[0], k[1], v[0], v[1])
    assert parse_scheme(f"{spell(*k)}/{spell(*v)}") == s
    assert parse_scheme(str(s)) == s                      # canonical form parses back to itself
    assert parse_scheme(str(s).upper()) == s
    if k[0] == v[0] and k[0] != 'fp16':
        assert parse_scheme(f"{k[0]}:{k[1]},{v[1]}") == s


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aefinorbtu016:,./ 23489", max_size=16))
def test_anything_else_is_a_value_error_naming_the_forms(text):
    try:
        s = parse_scheme(text)
    except ValueError as e:
        assert 'valid' in str(e) or 'must be' in str(e)
        return
    assert isinstance(s, KVScheme) and parse_scheme(str(s)) == s


@pytest.mark.parametrize("b", range(1, 8))
def test_fractional_turbo_is_one_bit_apart(b):
    s = parse_scheme(f"turbo:{b}.5")
    assert sorted([s.k_bits, s.v_bits]) == [b, b + 1]
