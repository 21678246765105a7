"""What is watched: the PodMonitoring scrape targets and the Cloud Monitoring dashboard and alerts. Imports facts,
config, plan and cloud.
"""
