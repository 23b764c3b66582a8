"""Tests of the operator command line (status, describe, drain) on pure models."""
