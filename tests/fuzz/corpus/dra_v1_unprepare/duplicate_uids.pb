

defaultafirst

defaultbb

defaultasecond