"""Adapters that put this project's envs into other frameworks, one module each, each behind its
framework's optional extra (importing one without it says which extra to install). All of them
wrap the same two things: the env contract (``ragen_envs.base``) and the chat wrapper
(``ragen_envs.agent.ChatEnv``)."""
