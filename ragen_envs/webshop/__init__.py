from ragen_envs.webshop.env import WebShopEnv

__all__ = ["WebShopEnv"]
