package dev.replicad.registry;

import io.apicurio.common.apps.config.DynamicConfigPropertyList;
import java.util.List;
import javax.enterprise.context.ApplicationScoped;
import javax.enterprise.inject.Produces;

/**
 * The bean Apicurio's config-index Quarkus extension would generate at build time: the list
 * of properties that may be changed at run time. Its deployment module is not on Maven
 * Central (see ../../../../../../pom.xml), so the registry runs with none: every setting the
 * tests need is a start-up flag or a per-subject compatibility level.
 */
@ApplicationScoped
public class ConfigIndexBeans {
    @Produces
    @ApplicationScoped
    DynamicConfigPropertyList noDynamicProperties() {
        return new DynamicConfigPropertyList(List.of());
    }
}
