"""The wheel holds pgq_core, pgq_tui and pgq_cli (pyproject.toml's `packages.find`); an
editable install of a clone (`pip install -e .`) maps pgq_bench as well, so `pgq bench`, the
benchmarks/ scripts and the processes they start import it like any installed package."""

from setuptools import setup
from setuptools.command.editable_wheel import editable_wheel


class EditableWithBench(editable_wheel):
    """`pip install -e .`: the packages of the wheel, and the benchmarks beside them."""

    def run(self) -> None:
        packages = list(self.distribution.packages or [])
        if "pgq_bench" not in packages:
            self.distribution.packages = [*packages, "pgq_bench"]
        super().run()


setup(cmdclass={"editable_wheel": EditableWithBench})
