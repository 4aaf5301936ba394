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
