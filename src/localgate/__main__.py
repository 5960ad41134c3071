"""``python -m localgate``."""

from localgate.cli import main

main()
