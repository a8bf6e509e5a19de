"""The snapshot worker's pure decisions: image names, the commit Job, the source Pod, the plan."""
