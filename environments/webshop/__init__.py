"""WebShop (Yao et al., 2022) in text mode: an embedded catalog or the original data, one engine."""

from environments.webshop.environment import WebShopEnvironment, WebShopEpisode

__all__ = ["WebShopEnvironment", "WebShopEpisode"]
