"""kvcore tests: unit, behaviour and property tests of the caches."""
