"""Reads sys.argv by hand: its options cannot be known statically."""
import sys

resume = sys.argv[1] if len(sys.argv) > 1 else None
