"""Compiled native core of kbroker (built from the top-level _native/ sources).

Import the public API from `broker.native`; these modules are its implementation.
"""
