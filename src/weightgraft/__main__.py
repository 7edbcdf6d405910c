"""`python -m weightgraft ...` (what `torchrun -m weightgraft run CONFIG` starts): the CLI."""

from weightgraft.cli import main

if __name__ == "__main__":
    main()
