"""The llm-d router: the endpoint picker (EPP) chart and its scoring configuration, the render Service, and the prefill
calibration Job. Imports facts, config, plan, cloud and platform.
"""
