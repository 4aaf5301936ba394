"""Argument types the command line's subcommands share, in a light module: `fastkwire broker`
reads its flags without importing the proxy's command line."""

import argparse

from .proxy._caps import parse_address


def address(text):
    try:
        return parse_address(text, "address")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT") from None


def count(text):
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive count: {text!r}")
    return int(text)


def rule(text):
    """A fault rule, as `fastkwire proxy --fault` and `fastkwire broker --fault` take it."""
    from .proxy._faults import Rule, RuleError

    try:
        return Rule.parse(text)
    except RuleError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
