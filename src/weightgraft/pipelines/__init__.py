"""Whole jobs built from the other packages: data -> models -> runner -> reporting."""
