"""One-time codes for the web app's address (zocratesd/shim/codes.py): once, briefly, few."""

from __future__ import annotations

from zocratesd.shim.codes import CODE_TTL_S, MAX_OUTSTANDING, OneTimeCodes


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_code_is_redeemed_once() -> None:
    codes = OneTimeCodes()
    code = codes.mint()
    assert len(code) >= 40 and codes.outstanding() == 1
    assert codes.redeem(code)
    assert not codes.redeem(code)
    assert codes.outstanding() == 0


def test_wrong_codes_spend_nothing() -> None:
    codes = OneTimeCodes()
    code = codes.mint()
    for wrong in ["", code[:-1], code + "x", code.upper() if code != code.upper() else code.lower(), "\udcff", "é" * 43]:
        assert not codes.redeem(wrong), wrong
    assert codes.redeem(code)


def test_a_code_expires() -> None:
    clock = Clock()
    codes = OneTimeCodes(clock=clock)
    late, fresh = codes.mint(), None
    clock.now += CODE_TTL_S - 1
    fresh = codes.mint()
    clock.now += 1
    assert not codes.redeem(late)
    assert codes.redeem(fresh)


def test_codes_never_pile_up() -> None:
    codes = OneTimeCodes()
    minted = [codes.mint() for _ in range(MAX_OUTSTANDING + 5)]
    assert codes.outstanding() == MAX_OUTSTANDING
    assert not codes.redeem(minted[0])  # the oldest went first
    assert codes.redeem(minted[-1])
    assert len(set(minted)) == len(minted)


def test_the_commands_say_how_long_a_code_lives() -> None:
    from zocratesd.weblink import CODE_TTL_WORDS

    assert CODE_TTL_WORDS == f"{CODE_TTL_S / 60:g} minutes"
