"""The operator's command line for people: ``paralleljob status|describe|drain|undrain`` (also as
``kubectl paralleljob ...``). Pure models built with the operator's own parsers, a thin I/O layer, and
rendering with rich."""
