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


def add_fault_arguments(group, fault_help):
    """--fault (its help: `fault_help`), --rules and --seed; fault_rules reads them."""
    group.add_argument(
        "--fault", type=rule, action="append", default=[], metavar="RULE", help=fault_help
    )
    group.add_argument(
        "--rules", metavar="FILE", help='fault rules from a JSON file: {"rules": [{...}, ...]}'
    )
    group.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed for the rules' probabilities (repeatable runs; wins over a rules file's seed)",
    )


def fault_rules(args):
    """(rules, seed) from --fault, --rules and --seed: the file's rules after the flags', its
    seed unless --seed is given (OSError, RuleError: the file)."""
    from .proxy._faults import read_rules_file

    rules, seed = list(args.fault), args.seed
    if args.rules:
        from_file, file_seed = read_rules_file(args.rules)
        rules += from_file
        seed = file_seed if seed is None else seed
    return rules, seed
