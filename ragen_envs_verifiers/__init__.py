"""The verifiers 0.4 taskset plugin of ragen-envs: verifiers finds a taskset by its id as a top-level
package exporting its Taskset and Env through ``__all__`` (``vf-eval ragen-envs-verifiers``). The
adapter itself is ``ragen_envs.integrations.verifiers_v1``."""

from ragen_envs.integrations.verifiers_v1 import RagenEnv, RagenTaskset

__all__ = ["RagenTaskset", "RagenEnv"]
