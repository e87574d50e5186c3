//! The ARNs the code builds itself, in the region's partition (`aws`, `aws-cn`, `aws-us-gov`, …):
//! an ARN of the wrong partition matches no resource, so a policy simulated or granted on it
//! says nothing about the real one.

/// The partition of `region`, as AWS's endpoint rules name it: `aws-cn` for the China regions
/// (`cn-*`), `aws-us-gov` for GovCloud (`us-gov-*`), the ISO partitions for theirs, `aws` for every
/// other region (and for a local emulator's).
pub fn partition(region: &str) -> &'static str {
    const PARTITIONS: [(&str, &str); 6] = [
        ("cn-", "aws-cn"),
        ("us-gov-", "aws-us-gov"),
        ("us-isob-", "aws-iso-b"),
        ("us-isof-", "aws-iso-f"),
        ("us-iso-", "aws-iso"),
        ("eu-isoe-", "aws-iso-e"),
    ];
    PARTITIONS
        .iter()
        .find(|(prefix, _)| region.starts_with(prefix))
        .map_or("aws", |(_, partition)| partition)
}

/// The ARN of the bucket `bucket` in `partition` (bucket ARNs carry no region or account).
pub fn bucket(partition: &str, bucket: &str) -> String {
    format!("arn:{partition}:s3:::{bucket}")
}

/// The ARN of the objects of `bucket` whose key starts with `prefix`, in `partition`.
pub fn objects(partition: &str, bucket: &str, prefix: &str) -> String {
    format!("arn:{partition}:s3:::{bucket}/{prefix}*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_region_gets_its_partition() {
        assert_eq!(partition("eu-west-1"), "aws");
        assert_eq!(partition("us-east-1"), "aws");
        assert_eq!(partition("cn-north-1"), "aws-cn");
        assert_eq!(partition("cn-northwest-1"), "aws-cn");
        assert_eq!(partition("us-gov-west-1"), "aws-us-gov");
        assert_eq!(partition("us-iso-east-1"), "aws-iso");
        assert_eq!(partition("us-isob-east-1"), "aws-iso-b");
    }

    #[test]
    fn bucket_arns_name_the_partition() {
        assert_eq!(bucket("aws-cn", "orders"), "arn:aws-cn:s3:::orders");
        assert_eq!(
            objects("aws-us-gov", "orders", "payloads/"),
            "arn:aws-us-gov:s3:::orders/payloads/*"
        );
    }
}
