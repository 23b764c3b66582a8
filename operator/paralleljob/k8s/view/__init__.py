"""What the operator knows of the cluster between passes, without I/O: the in-memory stores of watched
objects (``store``), the cluster view the core places on (``clusterview``), kept alive and patched with what
changed (``liveview``, with DRA pools laid over their nodes by ``dranodes``) and checked against a rebuild
(``viewcheck``).
"""
